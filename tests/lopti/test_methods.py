"""LOPTI's methods of the GRPO engine (``tailtheory/lopti/methods.py``): ``ar`` (L2) and the
two-pass ``lopti`` / ``lopti_reversed`` schedule (L3) on batches small enough to check by hand,
their registration, and the checks of ``alpha``, ``eta`` and the opposite methods'
``upweight_c`` and ``token_fraction`` (the methods themselves: ``test_opposite.py``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from policy_batches import ATOL, HP, batch
from tailtheory.engine.registry import get_method, parse_methods, passes, registered
from tailtheory.engine.types import PolicyBatch
from tailtheory.lopti import methods as lm


def test_registered_with_stage_metrics_and_checks():
    """After discovery the three methods are this module's, at their stages, with their keys."""
    want = {"ar": ("reweight", ("ar/scale_mean",), lm.check_alpha),
            "lopti": ("schedule", ("lopti/low_frac",), lm.check_eta),
            "lopti_reversed": ("schedule", ("lopti/low_frac",), lm.check_eta)}
    methods = registered()
    for name, (stage, metrics, check) in want.items():
        m = methods[name]
        assert (m.stage, m.metrics, m.validate) == (stage, metrics, check), name
        assert m.fn.__module__ == "tailtheory.lopti.methods"


@pytest.mark.parametrize("kw, message", [
    (dict(alpha=1.5), r"alpha must lie in \[0, 1\], got 1.5"),
    (dict(alpha=-0.1), "alpha must lie in"),
    (dict(eta=0.0), r"eta must lie in \(0, 1\), got 0.0"),
    (dict(eta=1.0), "eta must lie in"),
    (dict(upweight_c=-0.1), r"upweight_c must be a finite number >= 0, got -0.1"),
    (dict(upweight_c=float("inf")), "upweight_c must be a finite number"),
    (dict(token_fraction=0.0), r"token_fraction must lie in \(0, 1\], got 0.0"),
    (dict(token_fraction=1.5), "token_fraction must lie in"),
])
def test_bad_hyperparameters_raise_whatever_the_method(kw, message):
    """The checks run on every config (here one that names none of the section's methods)."""
    from tailtheory.engine.config import TrainConfig

    with pytest.raises(ValueError, match=message):
        TrainConfig(model="tiny", method="tis", **kw)
    check = {"alpha": lm.check_alpha, "eta": lm.check_eta, "upweight_c": lm.check_upweight_c,
             "token_fraction": lm.check_token_fraction}[next(iter(kw))]
    with pytest.raises(ValueError, match=message):
        check(replace(HP, **kw))
    check(HP)


def test_ar_reweights_both_signs_detached():
    """L2: alpha = 0.3, pi_old = (0.5, 0.1): scales 0.85 and 0.73; A = (2, -2) -> (1.7, -1.46)."""
    b = batch(old_p=[[0.5, 0.1]], adv=[[2.0, -2.0]])
    b = replace(b, old_logp=b.old_logp.clone().requires_grad_(True))
    adv, m = get_method("ar").fn(b, HP)
    torch.testing.assert_close(adv, torch.tensor([[1.7, -1.46]], dtype=adv.dtype), atol=1e-12,
                               rtol=0)
    assert not adv.requires_grad  # pi_old is detached
    adv0, _ = get_method("ar").fn(b, replace(HP, alpha=0.0))
    torch.testing.assert_close(adv0, b.adv)  # alpha = 0 is plain GRPO


def test_lopti_groups_and_order():
    """L3: pi_old = (0.2, 0.7 | 0.5, 0.4), eta = 0.5: low = {0.2, 0.4} (0.5 is not < 0.5)."""
    b = batch(old_p=[[0.2, 0.7], [0.5, 0.4]])
    groups, m = get_method("lopti").fn(b, HP)
    assert [g[0] for g in groups] == ["low", "high"]
    assert groups[0][1].tolist() == [[True, False], [False, True]]
    assert groups[1][1].tolist() == [[False, True], [True, False]]
    assert m["lopti/low_frac"] == 0.5
    rev, _ = get_method("lopti_reversed").fn(b, HP)
    assert [g[0] for g in rev] == ["high", "low"]


def _run_schedule(method: str) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Lopti on a bandit: one shared logit vector z (V = 3) for every token, SGD, the grpo loss.

    Shared parameters make the second pass see the first pass's update (as in a real network).
    Returns the active mask of each pass and the final logits.
    """
    z = torch.tensor([2.0, 0.0, -1.0], dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([[0, 1, 2, 0]])                               # (B=1, T=4)
    mask = torch.ones(1, 4, dtype=torch.bool)
    old = torch.log_softmax(z.detach(), -1)[tokens]                     # pi_old fixed
    b = PolicyBatch(logp=old, old_logp=old, roll_logp=old, mask=mask,
                    adv=torch.tensor([[1.0, 1.0, -1.0, 1.0]], dtype=torch.float64))
    spec, hp = parse_methods(method), replace(HP, eta=0.5)
    groups, _ = passes(spec, b, hp)
    opt = torch.optim.SGD([z], lr=1.0)
    seen = []
    for _, active in groups:
        opt.zero_grad()
        logp = torch.log_softmax(z, -1)[tokens]                        # recomputed per pass
        loss, m = spec.loss.fn(replace(b, logp=logp, active=active), hp)
        if seen:  # the second pass sees the moved policy against the SAME pi_old
            assert m["loss/approx_kl"] > 0
        else:     # first pass: ratio 1, loss = -sum(A over active) / 4 (all response tokens)
            assert loss.item() == pytest.approx(-float((b.adv * active).sum()) / 4, abs=ATOL)
        loss.backward()
        opt.step()
        seen.append(active)
    return seen, z.detach()


def test_lopti_updates_low_group_first_and_order_matters():
    """L3: pi_old = softmax(2, 0, -1) = (.84, .11, .04): tokens 1, 2 (low) go first under lopti,
    last under lopti_reversed; the final policies differ."""
    low_first, z_low = _run_schedule("lopti")
    high_first, z_high = _run_schedule("lopti_reversed")
    assert low_first[0].tolist() == [[False, True, True, False]]
    assert high_first[0].tolist() == [[True, False, False, True]]
    assert (z_low - z_high).abs().max() > 1e-3
