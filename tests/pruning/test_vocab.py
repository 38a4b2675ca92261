"""Property tests of ``tailtheory.pruning.vocab``: DVP's vocabulary pruning, claims P1-P3 (and
P2's min-p mass bound; the chunked P4 quantities are checked here against the one-shot code).
The safe set's rules on their own (``tailtheory.core.safeset``) are ``tests/core/test_safeset.py``;
here they meet the pruned mass."""

import math
from unittest.mock import patch

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from strategies import UNIT, logits, masked_logits
from strategies import safe_threshold as _threshold
from tailtheory.core import stats
from tailtheory.core.checks import ATOL_F64
from tailtheory.pruning.sweep import remaining_mismatch
from tailtheory.core.safeset import RULES, safe_vocab_mask
from tailtheory.pruning.vocab import (kept_log_mass, min_p_mass_bound, pruned_kl,
                                      pruned_log_softmax, pruned_mass, pruned_tv,
                                      truncation_bias, truncation_log_ratio)


def _check_p1(z, rule, x):
    keep = safe_vocab_mask(z, rule, x)
    m = pruned_mass(z, keep)
    assert keep.any(-1).all()
    assert torch.allclose(pruned_tv(z, keep), m, rtol=0, atol=ATOL_F64)
    assert torch.allclose(pruned_kl(z, keep), -kept_log_mass(z, keep), rtol=0, atol=ATOL_F64)
    small = m < 0.5
    assert torch.allclose(pruned_kl(z, keep)[small], -torch.log1p(-m[small]), rtol=0, atol=ATOL_F64)
    return m


# --- the safe set (its rules alone: tests/core/test_safeset.py) ------------------------------

@given(logits(max_v=512, batch=(4,)), st.sampled_from(RULES), UNIT, st.floats(0.0, 1.0))
def test_mask_monotone_in_threshold(z, rule, u, shrink):
    """Metamorphic: a larger threshold keeps a subset, and prunes at least as much mass."""
    a = _threshold(rule, u, z)
    b = a * shrink
    lo, hi = min(a, b), max(a, b)
    k_lo, k_hi = safe_vocab_mask(z, rule, lo), safe_vocab_mask(z, rule, hi)
    assert not (k_hi & ~k_lo).any()
    assert (pruned_mass(z, k_hi) >= pruned_mass(z, k_lo)).all()


@given(logits(max_v=512, batch=(2,)), st.sampled_from(("min_p", "top_p")), UNIT,
       st.floats(-1e3, 1e3))
def test_mask_and_mass_shift_invariant(z, rule, u, c):
    """Metamorphic: adding a constant to every logit changes neither S nor m (up to round-off)."""
    x = _threshold(rule, u, z)
    keep = safe_vocab_mask(z, rule, x)
    moved = safe_vocab_mask(z + c, rule, x)
    lp = torch.log_softmax(z, -1)
    # a token may only flip when it sits within round-off of the threshold
    border = (lp - lp.amax(-1, keepdim=True) - math.log(max(x, 1e-300))).abs() < 1e-9
    assert rule == "top_p" or not (moved ^ keep)[~border].any()
    assert torch.allclose(pruned_mass(z + c, keep), pruned_mass(z, keep), rtol=1e-9, atol=1e-15)


# --- P1: exact identities --------------------------------------------------------------------

@given(logits(min_v=1, max_v=4096, batch=(3,)), st.sampled_from(RULES), UNIT)
@example(torch.tensor([[0.0, -700.0, -700.0]], dtype=torch.float64), "min_p", 1e-100)
def test_p1_tv_and_kl_identities(z, rule, u):
    """P1: TV(pi~, pi) = m and KL(pi~ || pi) = -log(1 - m) to float64 precision.

    Pinned: a pruned mass of 2 e^-700 (~1e-304) must come out positive, not rounded to 0."""
    m = _check_p1(z, rule, _threshold(rule, u, z))
    if z.shape[-1] == 3 and float(z[0, 1]) == -700.0 and u == 1e-100:
        assert 0 < float(m[0]) < 1e-300


def test_p1_extreme_mass_near_one():
    """P1 at m -> 1: min-p at rho = 1 on a flat vocabulary keeps one token of 10^5."""
    z = torch.zeros(1, 100_000, dtype=torch.float64)
    z[0, 0] = 1e-9
    m = _check_p1(z, "min_p", 1.0)
    assert float(m) == pytest.approx(1 - 1e-5, rel=1e-8)
    assert float(pruned_kl(z, safe_vocab_mask(z, "min_p", 1.0))) == pytest.approx(
        math.log(1e5), rel=1e-8)


def test_kept_log_mass_accurate_at_both_ends():
    """log pi(S) keeps its relative precision when m ~ 1e-22 (log1p) and when pi(S) ~ 1e-22."""
    z = torch.tensor([[0.0, -50.0], [-50.0, 0.0]], dtype=torch.float64)
    keep = torch.tensor([[True, False], [True, False]])
    tiny = math.exp(-50) / (1 + math.exp(-50))
    assert float(pruned_mass(z, keep)[0]) == pytest.approx(tiny, rel=1e-14, abs=0)
    assert float(kept_log_mass(z, keep)[0]) == pytest.approx(math.log1p(-tiny), rel=1e-14, abs=0)
    assert float(kept_log_mass(z, keep)[1]) == pytest.approx(math.log(tiny), rel=1e-14)


@pytest.mark.parametrize("rule", RULES)
def test_p1_zero_threshold_prunes_nothing(rule):
    z = torch.randn(5, 30, dtype=torch.float64) * 20
    keep = safe_vocab_mask(z, rule, 0.0)
    assert keep.all()
    assert torch.equal(pruned_mass(z, keep), torch.zeros(5, dtype=torch.float64))
    assert torch.equal(pruned_log_softmax(z, keep), torch.log_softmax(z, -1))
    assert pruned_kl(z, keep).abs().max() == 0 and pruned_tv(z, keep).abs().max() < 1e-15


# --- P2: the min-p mass bound (trajectories: test_trajectory.py) -----------------------------


@given(logits(min_v=2, max_v=1024, batch=(4,)), st.floats(0.0, 1.0))
def test_p2_min_p_mass_bound_holds(z, rho):
    keep = safe_vocab_mask(z, "min_p", rho)
    assert (pruned_mass(z, keep) <= min_p_mass_bound(z, keep, rho) * (1 + 1e-12) + 1e-300).all()


def test_p2_min_p_mass_bound_tight():
    """Witness: every pruned token sits just below rho * max pi, so m / bound -> 1."""
    V, rho = 1000, 1e-4
    z = torch.full((1, V), math.log(rho) - 1e-9, dtype=torch.float64)
    z[0, 0] = 0.0
    keep = safe_vocab_mask(z, "min_p", rho)
    assert int(keep.sum()) == 1
    ratio = float(pruned_mass(z, keep) / min_p_mass_bound(z, keep, rho))
    assert 0.999 <= ratio <= 1.0


# --- P3: one-sided truncation ----------------------------------------------------------------

@given(logits(max_v=2048, batch=(6,)), st.sampled_from(RULES), UNIT, st.floats(0.0, 1.0),
       st.integers(0, 99))
def test_p3_one_sided_truncation_is_a_constant_log_mass(z, rule, u, noise, seed):
    """P3: one-sided log-ratio = both-sided log-ratio + log pi_train(S), exactly, for all k in S."""
    g = torch.Generator().manual_seed(seed)
    z_prime = z + noise * torch.randn(z.shape, generator=g, dtype=torch.float64)
    x = _threshold(rule, u, z_prime)
    keep = safe_vocab_mask(z_prime, rule, x)
    lp_prime = pruned_log_softmax(z_prime, keep)
    k = torch.multinomial(lp_prime.exp(), 1, generator=g)[:, 0]
    both = (pruned_log_softmax(z, keep) - lp_prime).gather(-1, k[:, None])[:, 0]
    one = truncation_log_ratio(z, keep, k, sampler_logits=z_prime)
    bias = truncation_bias(z, keep)
    assert torch.allclose(one - both, bias, rtol=0, atol=ATOL_F64) and (bias <= 0).all()
    assert torch.allclose(truncation_log_ratio(z, keep, k), bias, rtol=0, atol=ATOL_F64)


# --- bad input -------------------------------------------------------------------------------

def test_bad_logits_and_masks():
    z = torch.zeros(2, 4, dtype=torch.float64)
    keep = torch.ones(2, 4, dtype=torch.bool)
    for fn in (pruned_log_softmax, pruned_mass, pruned_tv, pruned_kl, kept_log_mass):
        with pytest.raises(ValueError, match="same shape"):
            fn(z, keep[:, :3])
        with pytest.raises(ValueError, match="keeps no token in 1 row"):
            fn(z, torch.tensor([[True] * 4, [False] * 4]))
        with pytest.raises(ValueError, match="bool"):
            fn(z, keep.long() * 2)
    with pytest.raises(ValueError, match="safe set"):
        truncation_log_ratio(z, torch.tensor([[True, False] * 2] * 2), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="sampler_logits"):
        truncation_log_ratio(z, keep, torch.tensor([0, 0]), sampler_logits=z[:, :3])


@pytest.mark.parametrize("rule", RULES)
def test_vocabulary_of_one(rule):
    z = torch.tensor([[3.0], [-2.0]], dtype=torch.float64)
    keep = safe_vocab_mask(z, rule, 0.999 if rule != "absolute" else 1.0)
    assert keep.all()
    assert torch.equal(pruned_log_softmax(z, keep), torch.zeros_like(z))
    assert torch.equal(pruned_mass(z, keep), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError):
        safe_vocab_mask(z, rule, 1.5)


# --- masked (-inf) logits, masks, chunking -------------------------------------------------------

@given(masked_logits(max_v=256), st.floats(0.0, 1.0), st.sampled_from(RULES))
def test_P1_with_minus_inf_equal_the_restricted_rows(args, u, rule):
    """P1 on logits with -inf entries (what pruned_log_softmax returns) equals P1 on each row's
    finite entries; the pruned policy of a pruned policy is itself (pruning is idempotent)."""
    z, alive = args
    x = _threshold(rule, u, z)
    keep = safe_vocab_mask(z, rule, x)
    assert x == 0 or not (keep & ~alive).any()                         # -inf is pruned by x > 0
    out = {f.__name__: f(z, keep) for f in (pruned_mass, kept_log_mass, pruned_tv, pruned_kl)}
    lp = pruned_log_softmax(z, keep)
    for i in range(z.shape[0]):
        a = alive[i]
        for f in (pruned_mass, kept_log_mass, pruned_tv, pruned_kl):
            assert out[f.__name__][i].item() == pytest.approx(f(z[i][a], keep[i][a]).item(),
                                                              abs=1e-12)
        torch.testing.assert_close(lp[i][a], pruned_log_softmax(z[i][a], keep[i][a]), rtol=0,
                                   atol=1e-12)
    torch.testing.assert_close(pruned_log_softmax(lp, keep), lp, rtol=0, atol=1e-12)
    assert all(torch.isfinite(v).all() for v in out.values())


def test_minus_inf_only_keep_and_dead_rows_rejected():
    z = torch.tensor([[0.0, -math.inf, 1.0]], dtype=torch.float64)
    only_dead = torch.tensor([[False, True, False]])
    for fn in (pruned_log_softmax, pruned_mass, pruned_kl, kept_log_mass):
        with pytest.raises(ValueError, match="keeps only tokens whose logits is -inf"):
            fn(z, only_dead)
    with pytest.raises(ValueError, match="every entry is -inf"):
        safe_vocab_mask(torch.full((2, 3), -math.inf), "min_p", 0.1)
    with pytest.raises(ValueError, match="finite sampler logit"):
        truncation_log_ratio(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool),
                             torch.tensor([1]), sampler_logits=z)


def test_zero_one_keep_accepted_and_weights_refused():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 9, generator=g, dtype=torch.float64)
    keep = safe_vocab_mask(z, "min_p", 0.2)
    for fn in (pruned_log_softmax, pruned_mass, pruned_tv, pruned_kl, kept_log_mass):
        assert torch.equal(fn(z, keep.float()), fn(z, keep))
        with pytest.raises(ValueError, match="mask must be a bool tensor, or a numeric one"):
            fn(z, keep * 0.5)


def _naive_pruning(z, keep, z_prime):
    """The unchunked formulas on whole tensors (finite logits)."""
    lpt = torch.log_softmax(z.masked_fill(~keep, -math.inf), -1)
    lp = torch.log_softmax(z, -1)
    m = torch.exp(torch.logsumexp(z.masked_fill(keep, -math.inf), -1) - torch.logsumexp(z, -1))
    direct = torch.logsumexp(z.masked_fill(~keep, -math.inf), -1) - torch.logsumexp(z, -1)
    lpq = torch.log_softmax(z_prime.masked_fill(~keep, -math.inf), -1)
    Delta = torch.where(keep, lpq - lpt, torch.zeros_like(lpt))
    return {"lsm": lpt, "mass": m, "klm": torch.where(m < 0.5, torch.log1p(-m.clamp(max=0.5)),
                                                       direct),
            "tv": 0.5 * (lpt.exp() - lp.exp()).abs().sum(-1),
            "kl": torch.where(keep, lpt.exp() * (lpt - lp), torch.zeros_like(lp)).sum(-1),
            "min_p": (~keep).sum(-1).double() * 0.01 * torch.softmax(z, -1).amax(-1),
            "bias": (lpq.exp() * Delta).sum(-1), "abs_max": Delta.abs().amax(-1)}


@given(logits(max_v=200, batch=(2, 3)), st.sampled_from(RULES), st.floats(0.0, 1.0))
def test_chunked_pruning_equals_the_one_shot_code(z, rule, u):
    """Blocks of one row (CHUNK_ELEMENTS = 1) against the unchunked P1-P4 formulas."""
    x = _threshold(rule, u, z)
    g = torch.Generator().manual_seed(z.shape[-1])
    z_prime = z + 0.3 * torch.randn(z.shape, generator=g, dtype=torch.float64)
    want_keep = safe_vocab_mask(z, rule, x)
    with patch.object(stats, "CHUNK_ELEMENTS", 1):
        keep = safe_vocab_mask(z, rule, x)
        got = {"lsm": pruned_log_softmax(z, keep), "mass": pruned_mass(z, keep),
               "klm": kept_log_mass(z, keep), "tv": pruned_tv(z, keep), "kl": pruned_kl(z, keep),
               "min_p": min_p_mass_bound(z, keep, 0.01)}
        rem = remaining_mismatch(z, z_prime, keep)
    want = _naive_pruning(z, keep, z_prime)
    assert torch.equal(keep, want_keep)
    for name, v in got.items():
        torch.testing.assert_close(v, want[name].to(v.dtype), rtol=0, atol=1e-13, msg=name)
    assert rem["bias_mean"] == pytest.approx(float(want["bias"].mean()), abs=1e-13)
    assert rem["abs_delta_max"] == pytest.approx(float(want["abs_max"].max()), abs=1e-13)
