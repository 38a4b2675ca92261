"""DVP's safe set (``tailtheory/core/safeset.py``, claims P1-P4's ``S`` and P3's shared kept set):
never empty, each rule as its definition says, thresholds checked against their ranges, the
sampler's set with the sampled token always in it. Where ``S`` meets the pruned mass:
``tests/pruning/test_vocab.py``; the trainer-side renormalisation over the same ``S``:
``tests/engine/test_methods.py``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import UNIT, logits, safe_threshold
from tailtheory.core.safeset import (RHO_DEFAULT, RULES, THRESHOLD_RANGES, check_rule,
                                     check_threshold, dvp_keep, safe_vocab_mask)


# --- the safe set ------------------------------------------------------------------------------

@given(logits(min_v=1, max_v=2048, batch=(3,)), st.sampled_from(RULES), UNIT)
def test_mask_never_empty_and_keeps_the_argmax_under_min_p(z, rule, u):
    x = safe_threshold(rule, u, z)
    keep = safe_vocab_mask(z, rule, x)
    assert keep.dtype == torch.bool and keep.shape == z.shape and keep.any(-1).all()
    if rule in ("min_p", "top_p"):  # both always keep a most probable token (ties after rounding)
        lp = torch.log_softmax(z, -1)
        assert (keep & (lp == lp.amax(-1, keepdim=True))).any(-1).all()


def _top_p_reference(z: torch.Tensor, eta: float) -> torch.Tensor:
    """Slow reference: walk the tokens by decreasing probability until the mass reaches 1 - eta."""
    p = torch.softmax(z, -1).tolist()
    order = sorted(range(len(p)), key=lambda a: (-p[a], a))
    keep, mass = torch.zeros(len(p), dtype=torch.bool), 0.0
    for a in order:
        if mass >= 1 - eta:
            break
        keep[a], mass = True, mass + p[a]
    return keep


@given(logits(max_v=64, max_scale=5.0), st.floats(1e-3, 0.9))
def test_top_p_matches_loop_reference(z, eta):
    keep = safe_vocab_mask(z, "top_p", eta)
    ref = _top_p_reference(z, eta)
    # the two may differ only where the running mass sits within round-off of 1 - eta, or in
    # which of several (round-off) tied tokens they keep: then size and mass agree
    if not torch.equal(keep, ref):
        p = torch.softmax(z, -1)
        m_keep, m_ref = float(p[keep].sum()), float(p[ref].sum())
        tie = int(keep.sum()) == int(ref.sum()) and abs(m_keep - m_ref) < 1e-12
        border = abs(m_keep - (1 - eta)) < 1e-12 or abs(m_ref - (1 - eta)) < 1e-12
        assert tie or border, (m_keep, m_ref, int(keep.sum()), int(ref.sum()))


def test_min_p_matches_probability_rule_and_rho_one_keeps_the_ties():
    z = torch.tensor([[2.0, 2.0, 0.0, -5.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    p = torch.softmax(z, -1)
    for rho in (0.3, 0.01):
        assert torch.equal(safe_vocab_mask(z, "min_p", rho), p >= rho * p.amax(-1, keepdim=True))
    assert safe_vocab_mask(z, "min_p", 1.0).tolist() == [[True, True, False, False],
                                                         [True, False, False, False]]


def test_absolute_rule_and_the_default_threshold():
    """``absolute`` keeps ``pi >= tau``; the default is min-p at DVP's 1e-4."""
    z = torch.log(torch.tensor([[0.6, 0.3, 0.09, 0.01]], dtype=torch.float64))
    assert safe_vocab_mask(z, "absolute", 0.05).tolist() == [[True, True, True, False]]
    assert RHO_DEFAULT == 1e-4
    assert torch.equal(safe_vocab_mask(z), safe_vocab_mask(z, "min_p", 1e-4))


# --- thresholds and rules ----------------------------------------------------------------------

@pytest.mark.parametrize("rule, x, match", [
    ("min_p", 1.5, r"\[0, 1\]"), ("min_p", -1e-3, r"\[0, 1\]"), ("top_p", 1.0, r"\[0, 1\)"),
    ("absolute", 2.0, r"\[0, 1\]"), ("absolute", 0.9, "exceeds max"), ("min_p", float("nan"), "lie"),
    ("min_p", "x", "number"), ("nucleus", 0.1, "min_p.*top_p.*absolute")])
def test_bad_thresholds_and_rules(rule, x, match):
    z = torch.zeros(2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        safe_vocab_mask(z, rule, x)


def test_bad_logits():
    with pytest.raises(ValueError, match="NaN"):
        safe_vocab_mask(torch.tensor([[0.0, float("nan")]]), "min_p", 0.1)
    with pytest.raises(ValueError, match="scalar"):
        safe_vocab_mask(torch.tensor(1.0), "min_p", 0.1)
    with pytest.raises(ValueError, match="every entry is -inf"):
        safe_vocab_mask(torch.full((2, 3), -math.inf), "min_p", 0.1)


@pytest.mark.parametrize("rule", RULES)
def test_threshold_ranges_are_the_edges_the_checks_accept(rule):
    """Both checks accept exactly the range of :data:`THRESHOLD_RANGES` (the high end only when
    it is included) and return the threshold as a float."""
    lo, hi, closed = THRESHOLD_RANGES[rule]
    assert check_threshold(rule, lo) == lo and check_rule(rule, lo) == lo
    inside = (lo + hi) / 2
    assert check_threshold(rule, inside) == inside and check_rule(rule, inside) == inside
    for check in (check_threshold, check_rule):
        if closed:
            assert check(rule, hi) == hi
        else:
            with pytest.raises(ValueError, match=rf"{rule}.*\)"):
                check(rule, hi)
        with pytest.raises(ValueError, match=f"threshold for rule '{rule}'"):
            check(rule, hi + 0.5)


def test_check_rule_reads_none_as_no_pruning_and_wants_a_python_number():
    """``None`` is no pruning (threshold 0, whatever is passed); a tensor threshold is refused
    (the fused head compares it on every tile); an unknown rule lists the valid ones."""
    assert check_rule(None, "anything") == 0.0
    with pytest.raises(ValueError, match="must be a number in"):
        check_rule("min_p", torch.tensor(0.1))
    with pytest.raises(ValueError, match="None or one of"):
        check_rule("nucleus", 0.1)
    assert check_threshold("min_p", torch.tensor(0.25)) == 0.25


# --- DVP on both sides: the sampler's kept set (P3) --------------------------------------------

def test_dvp_keep_min_p_and_sampled_token_P3():
    """Logits (0, -1, -20), min-p rho = 1e-6: e^-20 < rho, so S = {0, 1}; a token sampled outside
    S (id 2) is put back in (the sampler can only have sampled inside its own S)."""
    z = torch.tensor([[[0.0, -1.0, -20.0], [0.0, -1.0, -20.0]]], dtype=torch.float64)
    keep = dvp_keep(z, torch.tensor([[0, 2]]), "min_p", 1e-6)
    assert keep.tolist() == [[[True, True, False], [True, True, True]]]


def test_dvp_keep_applies_the_temperature_P3():
    """The set is the rule on ``logits / tau``: at tau = 4 the logit gap 20 shrinks to 5, and
    e^-5 > 1e-3 keeps the token that tau = 1 prunes."""
    z = torch.tensor([[[0.0, -20.0]]], dtype=torch.float64)
    tok = torch.tensor([[0]])
    assert dvp_keep(z, tok, "min_p", 1e-3).tolist() == [[[True, False]]]
    assert dvp_keep(z, tok, "min_p", 1e-3, temperature=4.0).tolist() == [[[True, True]]]


def test_dvp_keep_rejects_nan_logits_P3():
    z = torch.zeros(2, 3, 4)
    z[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match="roll_logits"):
        dvp_keep(z, torch.zeros(2, 3, dtype=torch.long), "top_p", 0.5)


def test_dvp_keep_rejects_token_shape_P3():
    with pytest.raises(ValueError, match="tokens"):
        dvp_keep(torch.zeros(2, 3, 4), torch.zeros(3, dtype=torch.long), "top_p", 0.5)
