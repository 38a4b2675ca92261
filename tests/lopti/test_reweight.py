"""LOPTI's update changes (``tailtheory/lopti/reweight.py``): L2 Advantage Reweighting and L3
the two-pass schedule, on inputs small enough to check by hand; bad inputs raise naming the
argument."""

from __future__ import annotations

import math

import pytest
import torch

from tailtheory.lopti.reweight import advantage_reweight, lopti_passes


def test_advantage_reweight_by_hand_L2():
    """L2: alpha = 0.3, pi_old = (0.5, 0.1): scales 0.85 and 0.73; A = (2, -2) -> (1.7, -1.46);
    alpha = 0 is plain GRPO; pi_old is detached."""
    old = torch.tensor([[0.5, 0.1]], dtype=torch.float64).log().requires_grad_(True)
    adv = torch.tensor([[2.0, -2.0]], dtype=torch.float64)
    out = advantage_reweight(adv, old, 0.3)
    torch.testing.assert_close(out, torch.tensor([[1.7, -1.46]], dtype=torch.float64),
                               atol=1e-12, rtol=0)
    assert not out.requires_grad
    assert torch.equal(advantage_reweight(adv, old, 0.0), adv)
    with pytest.raises(ValueError, match="alpha"):
        advantage_reweight(adv, old, 1.5)


def test_lopti_passes_by_hand_L3():
    """L3: pi_old = (0.2, 0.7 | 0.5, 0.4), eta = 0.5: low = {0.2, 0.4} (0.5 is not < 0.5); the
    masked token (0.4 of row 1 is alive, 0.7 of row 0 is masked) is in neither group."""
    old = torch.tensor([[0.2, 0.7], [0.5, 0.4]], dtype=torch.float64).log()
    mask = torch.tensor([[True, False], [True, True]])
    (n1, low), (n2, high) = lopti_passes(old, mask, 0.5)
    assert (n1, n2) == ("low", "high")
    assert low.tolist() == [[True, False], [False, True]]
    assert high.tolist() == [[False, False], [True, False]]
    rev = lopti_passes(old, mask, 0.5, low_first=False)
    assert [n for n, _ in rev] == ["high", "low"] and torch.equal(rev[1][1], low)
    for eta in (0.0, 1.0, math.nan):
        with pytest.raises(ValueError, match="eta"):
            lopti_passes(old, mask, eta)


NAN_CASES = [
    ("advantage_reweight", lambda x, m: advantage_reweight(torch.ones(2, 3), x, 0.3), "old_logp"),
    ("lopti_passes", lambda x, m: lopti_passes(x, m, 0.5), "old_logp"),
]


@pytest.mark.parametrize("name, call, arg", NAN_CASES, ids=[c[0] for c in NAN_CASES])
def test_reject_nan(name, call, arg):
    """A NaN log-prob (even at a masked position) is an error naming the argument, never a token
    silently put in a group."""
    x = torch.full((2, 3), -0.5, dtype=torch.float64)
    x[0, 2] = float("nan")
    m = torch.ones(2, 3, dtype=torch.bool)
    m[0, 2] = False
    with pytest.raises(ValueError, match=arg):
        call(x, m)


SHAPE_CASES = [
    ("advantage_reweight", lambda: advantage_reweight(torch.ones(2, 3), torch.zeros(3), 0.3),
     "old_logp"),
    ("lopti_passes", lambda: lopti_passes(torch.zeros(2, 3), torch.ones(3).bool(), 0.5),
     "old_logp"),
]


@pytest.mark.parametrize("name, call, arg", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_reject_shape_mismatch(name, call, arg):
    """``lopti_passes(old_logp (2, 3), mask (3,))`` and the like raise instead of broadcasting."""
    with pytest.raises(ValueError, match=arg):
        call()
