"""The per-token KL estimators and the sequence filter (``tailtheory/core/estimators.py``; TIM's
k1/k2/k3, TRM's T12 filter): unbiased where they should be, ``>= 0`` where they should be, the
max filter on ``k2`` and the average on ``k3``. T12 as TRM states it, on exact and sampled
divergences: ``tests/trm/test_bounds.py``, ``tests/trm/test_mask.py``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import mismatch_cases
from tailtheory.core.estimators import (CRITERIA, k1, k2, k3, seq_avg_kl, seq_max_kl,
                                        trust_region_keep)


# --- k1, k2, k3 ----------------------------------------------------------------------------------

@given(mismatch_cases(max_v=512))
def test_k_estimators_unbiased_and_nonnegative(case):
    """k1 and k3 average to KL(pi_roll || pi_theta) under pi_roll; k2, k3 >= 0; all 0 at rho = 1."""
    z, delta, _, _ = case
    log_pi_theta, log_pi_roll = torch.log_softmax(z, -1), torch.log_softmax(z + delta, -1)
    pi_roll = log_pi_roll.exp()
    log_rho = log_pi_theta - log_pi_roll
    kl = (pi_roll * (log_pi_roll - log_pi_theta)).sum()
    for k in (k1, k3):
        assert abs(float((pi_roll * k(log_rho)).sum() - kl)) < 1e-9
    assert k2(log_rho).min() >= 0 and k3(log_rho).min() >= 0
    assert all(float(k(torch.zeros(3)).abs().max()) == 0 for k in (k1, k2, k3))


def test_k3_accurate_for_tiny_log_ratio():
    """k3 = rho - 1 - log rho keeps its ~ (log rho)^2 / 2 value where the naive form cancels."""
    r = torch.tensor([1e-9], dtype=torch.float64)
    assert abs(float(k3(r)) / 5e-19 - 1) < 1e-6


def test_k1_is_Delta():
    """Sign convention: with pi_theta the trainer and pi_roll the engine, k1 = Delta."""
    Delta = torch.tensor([0.3, -0.2])
    torch.testing.assert_close(k1(-Delta), Delta.double())


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_log_ratio_rejected(bad):
    lr = torch.tensor([0.0, bad])
    for k in (k1, k2, k3):
        with pytest.raises(ValueError, match="log_ratio"):
            k(lr)


# --- the sequence filter (T12) -------------------------------------------------------------------

ALIVE = torch.tensor([[True, True, False], [True, True, True]])


def test_sequence_reductions_ignore_dead_tokens_and_empty_rows_read_zero():
    d = torch.tensor([[0.1, 0.3, 9.0], [0.2, 0.2, 0.5], [7.0, 7.0, 7.0]], dtype=torch.float64)
    alive = torch.tensor([[True, True, False], [True, True, True], [False, False, False]])
    assert seq_max_kl(d, alive).tolist() == [0.3, 0.5, 0.0]
    torch.testing.assert_close(seq_avg_kl(d, alive),
                               torch.tensor([0.2, 0.3, 0.0], dtype=torch.float64))


def test_sampled_filter_reads_k2_for_max_and_k3_for_avg():
    """From log-ratios: log rho = (0.1, -0.5 | 0.2, 0.2, x) with the last token of row 0 dead.
    k2 maxima .125 and .02 against 0.1; k3 means over alive tokens against 0.03."""
    lr = torch.tensor([[0.1, -0.5, 4.0], [0.2, 0.2, 0.2]], dtype=torch.float64)
    assert trust_region_keep(ALIVE, "max", log_ratio=lr, delta_max=0.1).tolist() == [False, True]
    k3_mean = torch.stack([k3(lr[0, :2]).mean(), k3(lr[1]).mean()])    # .0562 .0214
    assert (trust_region_keep(ALIVE, "avg", log_ratio=lr, delta_avg=0.03).tolist()
            == (k3_mean <= 0.03).tolist() == [False, True])
    both = trust_region_keep(ALIVE, "both", log_ratio=lr, delta_max=0.1, delta_avg=0.03)
    assert both.tolist() == [False, True]


@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**31 - 1),
       st.sampled_from(CRITERIA))
def test_both_is_max_and_avg_and_thresholds_move_it_right(B, T, seed, criterion):
    """Metamorphic: ``both`` keeps what ``max`` and ``avg`` both keep; a larger threshold keeps
    a superset."""
    g = torch.Generator().manual_seed(seed)
    kl = torch.rand(B, T, generator=g, dtype=torch.float64) * 0.2
    alive = torch.rand(B, T, generator=g) < 0.8
    kw = dict(kl=kl, delta_max=0.1, delta_avg=0.05)
    keep = trust_region_keep(alive, criterion, **kw)
    if criterion == "both":
        assert torch.equal(keep, trust_region_keep(alive, "max", **kw)
                           & trust_region_keep(alive, "avg", **kw))
    looser = trust_region_keep(alive, criterion, kl=kl, delta_max=0.2, delta_avg=0.1)
    assert not (keep & ~looser).any()


def test_trm_names_the_core_filter():
    """TRM's section keeps its name for the filter: the same function, not a copy."""
    from tailtheory.trm import mask

    assert mask.trm_mask is trust_region_keep


@pytest.mark.parametrize("kwargs, match", [
    (dict(criterion="median", kl=torch.zeros(2, 3), delta_max=0.1), "criterion must be one of"),
    (dict(kl=torch.zeros(2, 3)), "needs delta_max"),
    (dict(criterion="avg", kl=torch.zeros(2, 3)), "needs delta_avg"),
    (dict(kl=torch.zeros(2, 3), log_ratio=torch.zeros(2, 3), delta_max=0.1), "exactly one"),
    (dict(log_ratio=torch.full((2, 3), math.nan), delta_max=0.1), "log_ratio"),
    (dict(kl=-torch.ones(2, 3), delta_max=0.1), "kl"),
])
def test_filter_rejects_bad_input(kwargs, match):
    criterion = kwargs.pop("criterion", "max")
    with pytest.raises(ValueError, match=match):
        trust_region_keep(ALIVE, criterion, **kwargs)
