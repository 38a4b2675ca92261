"""Property tests of tailtheory.mismatch.logprob: claims M1-M4 (DVP, TIM), one group per claim id
(M5: test_selection.py, M6: test_accumulation.py; the k1/k2/k3 estimators it re-exports:
tests/core/test_estimators.py)."""

import math
from unittest.mock import patch

import numpy as np
import pytest
import torch
from hypothesis import example, given, target
from hypothesis import strategies as st

from tailtheory.mismatch import logprob as mm

from strategies import logits, masked_logits, mismatch_cases
from tailtheory.core import stats

ATOL = 1e-10


# --- M1 -----------------------------------------------------------------------------------------

@given(mismatch_cases())
def test_m1_identity(case):
    """M1: log_softmax(z + delta) - log_softmax(z) = delta - log sum_j p_j e^delta_j."""
    z, delta, _, _ = case
    lhs = mm.logprob_mismatch(z, z + delta)
    rhs = mm.mismatch_identity(torch.softmax(z, -1), delta)
    torch.testing.assert_close(lhs, rhs, atol=ATOL, rtol=0)


@given(mismatch_cases(), st.floats(-100, 100))
def test_m1_shift_invariance_and_zero_at_zero(case, c):
    """M1: adding a constant to every delta_j leaves Delta unchanged; delta = c gives Delta = 0."""
    z, delta, _, _ = case
    Delta = mm.logprob_mismatch(z, z + delta)
    torch.testing.assert_close(mm.logprob_mismatch(z, z + delta + c), Delta, atol=ATOL, rtol=0)
    assert mm.logprob_mismatch(z, z + c).abs().max() < ATOL


def test_m1_batched_shapes():
    """M1 on (B, T, V) logits returns (B, T, V)."""
    z = torch.randn(2, 3, 17, dtype=torch.float64)
    assert mm.logprob_mismatch(z, z + 0.1 * torch.randn_like(z)).shape == (2, 3, 17)


# --- M2 -----------------------------------------------------------------------------------------

@given(logits(min_v=2, max_v=256, max_scale=3.0), st.integers(0, 2**31 - 1))
def test_m2_remainder_is_second_order(z, seed):
    """M2: Delta - sum_{j!=k} p_j (delta_k - delta_j) shrinks 100x when delta shrinks 10x."""
    p = torch.softmax(z, -1)
    g = torch.Generator().manual_seed(seed)
    d0 = 2 * torch.rand(z.shape[-1], generator=g, dtype=torch.float64) - 1
    d0[0], d0[-1] = -1.0, 1.0  # a non-constant direction: the remainder is not identically 0

    def rem(t):
        return (mm.mismatch_identity(p, t * d0) - mm.first_order_mismatch(p, t * d0)).abs().max()

    ratio = float(rem(1e-2) / rem(1e-3))
    assert 85 < ratio < 115, ratio


@given(mismatch_cases())
def test_m2_linear_bound_up_to_second_order(case):
    """M2: |Delta_k| <= 2 eps (1-p_k) + (1-p_k)(e^{2eps} - 1 - 2 eps): O(eps^2) explicit."""
    z, delta, k, eps = case
    p = torch.softmax(z, -1)
    Delta = mm.logprob_mismatch(z, z + delta).abs()
    second = (1 - p) * (math.expm1(2 * eps) - 2 * eps)
    assert (mm.mismatch_bound(p, eps, "linear") + second - Delta).min() >= -ATOL


@pytest.mark.parametrize("eps", [1e-2, 1e-3, 1e-4])
def test_m2_linear_bound_tight_and_exceeded_by_eps_squared(eps):
    """M2: the witness reaches 2 eps (1-p) to first order and exceeds it by Theta(eps^2)."""
    p, delta = mm.m3_witness(0.3, eps, V=5, k=2)
    Delta = float(mm.mismatch_identity(p, delta)[2].abs())
    linear = float(mm.mismatch_bound(p[2], eps, "linear"))
    excess = Delta - linear
    assert excess > 0 and 0.5 < excess / (0.7 * 0.3 * 2 * eps ** 2) < 1.5  # a(1-a) x^2/2
    assert abs(Delta / linear - 1) < 2 * eps


# --- M3 -----------------------------------------------------------------------------------------

F64 = dict(dtype=torch.float64)


@given(mismatch_cases())
@example((torch.zeros(3, **F64), torch.tensor([0.5, -0.5, 0.5], **F64), 1, 0.5))
def test_m3_bound_holds(case):
    """M3: |Delta_k| <= log(1 + (1-p_k)(e^{2eps}-1)) <= (1-p_k)(e^{2eps}-1), eps from the box and
    also the per-token eps measured from delta."""
    z, delta, k, eps = case
    p = torch.softmax(z.double(), -1)
    Delta = mm.logprob_mismatch(z, z + delta).abs()
    for e in (torch.tensor(eps, dtype=torch.float64), mm.mismatch_eps(delta, "token")):
        exact = mm.mismatch_bound(p, e, "exact")
        assert (exact - Delta).min() >= -ATOL
        assert (mm.mismatch_bound(p, e, "first") - exact).min() >= -ATOL
    ratio = torch.where(exact > 1e-12, Delta / exact, torch.zeros_like(Delta))
    target(float(ratio.max()), label="M3 ratio |Delta| / bound at the per-token eps")


@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 5), st.floats(0, 5))
def test_m3_bound_moves_right(p1, p2, e1, e2):
    """M3: the bound grows with eps, falls with p, is 0 at eps = 0 and at p = 1."""
    (pa, pb), (ea, eb) = sorted([p1, p2]), sorted([e1, e2])
    for order in mm.BOUND_ORDERS:
        b = lambda p, e: float(mm.mismatch_bound(p, e, order))  # noqa: E731
        assert b(pa, eb) >= b(pb, eb) - 1e-15 and b(pa, eb) >= b(pa, ea) - 1e-15
        assert b(pa, 0.0) == 0 and b(1.0, eb) == 0


@given(st.floats(1e-6, 1 - 1e-6), st.floats(1e-4, 3.0), st.integers(2, 64))
@example(p_k=0.3, eps=0.25, V=8)
@example(p_k=0.9999989999999999, eps=0.0001, V=4)  # Delta ~ 2e-10: absolute rounding dominates
def test_m3_witness_attains_bound(p_k, eps, V):
    """M3 is tight: delta_k = -eps, delta_j = +eps attains the exact bound (ratio 1)."""
    p, delta = mm.m3_witness(p_k, eps, V)
    Delta = float(mm.mismatch_identity(p, delta)[0].abs())
    bound = float(mm.mismatch_bound(p[0], eps))
    target(Delta / bound)
    # Delta = delta_k - log(sum_j p_j e^delta_j): the log of an O(1) sum carries an absolute
    # float64 error of a few 1e-16, which dominates when Delta itself is tiny (p_k near 1)
    assert abs(Delta - bound) <= 1e-9 * bound + 1e-15, (Delta, bound)


@pytest.mark.parametrize("kw", [{"V": 1}, {"V": 3, "k": 3}, {"p_k": 1.5}, {"eps": -0.1}])
def test_m3_witness_bad_input_is_an_error(kw):
    args = {"p_k": 0.5, "eps": 0.1, **kw}
    with pytest.raises(ValueError):
        mm.m3_witness(**args)


def test_m3_optimiser_finds_the_bound():
    """M3 is tight: L-BFGS from a random start reaches |Delta_k| / bound >= 0.99."""
    p = torch.softmax(2 * torch.randn(6, generator=torch.Generator().manual_seed(0),
                                      dtype=torch.float64), -1)
    ratio, delta = mm.worst_case_mismatch(p, k=3, eps=0.2, seed=1)
    assert ratio >= 0.99
    assert mm.mismatch_eps(delta, "token")[3] <= 0.2 + 1e-12  # the maximiser is admissible


# --- M4 -----------------------------------------------------------------------------------------

@given(mismatch_cases(max_v=512))
def test_m4_sampled_bias_is_kl(case):
    """M4: E_{k~p'}[Delta_k] = KL(p' || p) >= 0, zero when delta is constant."""
    z, delta, _, _ = case
    bias = mm.sampled_mismatch_bias(z, z + delta)
    kl = mm.kl_divergence(torch.softmax(z + delta, -1), torch.softmax(z, -1))
    assert abs(float(bias - kl)) < ATOL and float(bias) >= -ATOL
    assert abs(float(mm.sampled_mismatch_bias(z, z + 3.0))) < ATOL


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_logits_rejected(bad):
    z = torch.zeros(4, dtype=torch.float64)
    zb = z.clone()
    zb[2] = bad
    with pytest.raises(ValueError, match="perturbed_logits"):
        mm.logprob_mismatch(z, zb)
    with pytest.raises(ValueError, match="logits"):
        mm.logprob_mismatch(zb, z)


def test_probabilities_must_sum_to_one():
    with pytest.raises(ValueError, match="p must sum to 1"):
        mm.mismatch_identity(torch.tensor([0.5, 0.6]), torch.zeros(2))
    with pytest.raises(ValueError, match="p must lie in"):
        mm.mismatch_bound(1.5, 0.1)
    with pytest.raises(ValueError, match="q must sum"):
        mm.kl_divergence(torch.tensor([0.2, 0.2]), torch.tensor([0.5, 0.5]))


def test_shape_mismatch_rejected():
    with pytest.raises(ValueError, match="logits .* and perturbed_logits .* same shape"):
        mm.logprob_mismatch(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="p .* and delta"):
        mm.mismatch_identity(torch.full((3,), 1 / 3), torch.zeros(4))


def test_negative_eps_and_unknown_options_rejected():
    with pytest.raises(ValueError, match="eps must be >= 0"):
        mm.mismatch_bound(0.5, -1e-3)
    with pytest.raises(ValueError, match="order must be one of"):
        mm.mismatch_bound(0.5, 0.1, order="second")
    with pytest.raises(ValueError, match="per must be"):
        mm.mismatch_eps(torch.zeros(3), per="sequence")
    with pytest.raises(ValueError, match="infinite"):
        mm.kl_divergence(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="the bound is 0"):
        mm.worst_case_mismatch(torch.tensor([1.0, 0.0]), k=0, eps=0.1)


# --- masked (-inf) logits, large eps, chunking ---------------------------------------------------

@given(masked_logits(max_v=512), st.floats(0.0, 3.0), st.integers(0, 2**31 - 1))
def test_M1_M4_with_minus_inf_equal_the_restricted_rows(args, sigma, seed):
    """M1/M4 with tokens masked (-inf) on both sides equal the rows restricted to the live tokens;
    the masked entries of Delta are 0."""
    z, alive = args
    g = torch.Generator().manual_seed(seed)
    z_prime = z + sigma * torch.randn(z.shape, generator=g, dtype=torch.float64)
    Delta, bias = mm.logprob_mismatch(z, z_prime), mm.sampled_mismatch_bias(z, z_prime)
    assert (Delta[~alive] == 0).all() and torch.isfinite(bias).all()
    for i in range(z.shape[0]):
        a = alive[i]
        torch.testing.assert_close(Delta[i][a], mm.logprob_mismatch(z[i][a], z_prime[i][a]),
                                   rtol=0, atol=ATOL)
        assert bias[i].item() == pytest.approx(
            mm.sampled_mismatch_bias(z[i][a], z_prime[i][a]).item(), abs=ATOL)
        assert bias[i] >= -ATOL                                        # M4 on the live set


def test_one_sided_mask_gives_infinite_mismatch():
    """A token masked only by the trainer: Delta = +inf there and an infinite M4 bias (KL);
    masked only by the engine: Delta = -inf, and it adds nothing to E_{p'}[Delta]."""
    z = torch.tensor([0.0, -math.inf, 1.0], dtype=torch.float64)
    zp = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    assert mm.logprob_mismatch(z, zp)[1] == math.inf and mm.sampled_mismatch_bias(z, zp) == math.inf
    assert mm.logprob_mismatch(zp, z)[1] == -math.inf
    assert math.isfinite(mm.sampled_mismatch_bias(zp, z))


def test_all_minus_inf_row_rejected():
    z = torch.zeros(2, 4, dtype=torch.float64)
    z[1] = -math.inf
    for args in ((z, torch.zeros(2, 4)), (torch.zeros(2, 4), z)):
        with pytest.raises(ValueError, match=r"logits has 1 row\(s\) whose every entry is -inf"):
            mm.logprob_mismatch(*args)
    with pytest.raises(ValueError, match="delta contains"):
        mm.mismatch_identity(torch.tensor([0.5, 0.5]), torch.tensor([0.0, -math.inf]))


def _naive_mismatch(z, zp):
    """The unchunked formulas (finite logits): M1, M4 and KL on whole tensors."""
    Delta = torch.log_softmax(zp, -1) - torch.log_softmax(z, -1)
    q, p = torch.softmax(zp, -1), torch.softmax(z, -1)
    kl = torch.where(q > 0, q * (torch.log(q) - torch.log(p)), torch.zeros_like(q)).sum(-1)
    return Delta, (q * Delta).sum(-1), kl


@given(logits(max_v=300, batch=(3, 4)), st.floats(0.0, 2.0))
def test_chunked_mismatch_equals_the_one_shot_code(z, sigma):
    """Blocks of one row (CHUNK_ELEMENTS = 1) against the unchunked formulas."""
    g = torch.Generator().manual_seed(z.shape[-1])
    zp = z + sigma * torch.randn(z.shape, generator=g, dtype=torch.float64)
    q, p = torch.softmax(zp, -1), torch.softmax(z, -1)
    with patch.object(stats, "CHUNK_ELEMENTS", 1):
        got = (mm.logprob_mismatch(z, zp), mm.sampled_mismatch_bias(z, zp), mm.kl_divergence(q, p))
    for a, b in zip(got, _naive_mismatch(z, zp)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
    with patch.object(stats, "CHUNK_ELEMENTS", 7 * z.shape[-1]):      # ragged last block
        torch.testing.assert_close(mm.logprob_mismatch(z.float(), zp.float()),
                                   mm.logprob_mismatch(z.float().double(), zp.float().double()),
                                   rtol=0, atol=0)


@pytest.mark.parametrize("eps", [10.0, 354.0, 356.0, 1e3, 1e6, 1e300])
@pytest.mark.parametrize("p_k", [0.0, 1e-12, 0.3, 1 - 1e-12, 1.0])
def test_M3_bound_finite_for_large_eps(eps, p_k):
    """M3's exact bound never overflows: log(p + (1-p) e^{2eps}) in [0, 2 eps], monotone in eps;
    the first-order form is 0 at p = 1 and +inf only past float64's range."""
    exact = float(mm.mismatch_bound(p_k, eps))
    assert math.isfinite(exact) and 0 <= exact <= 2 * eps * (1 + 1e-15)
    if p_k == 0:
        assert exact == pytest.approx(2 * eps, rel=1e-15)
    if p_k == 1:
        assert exact == 0 and float(mm.mismatch_bound(p_k, eps, "first")) == 0
    first = float(mm.mismatch_bound(p_k, eps, "first"))
    assert first >= exact and not math.isnan(first)
    assert math.isfinite(float(mm.mismatch_bound(p_k, eps, "linear")))
    assert float(mm.mismatch_bound(p_k, eps * 1.5)) >= exact


@given(st.floats(0.0, 1.0), st.floats(0.0, 300.0))
def test_M3_bound_forms_agree_where_both_are_finite(p_k, eps):
    """Below the overflow the bound is log1p(first), unchanged; the log-space form agrees."""
    first = mm.mismatch_bound(p_k, eps, "first")
    exact = mm.mismatch_bound(p_k, eps)
    assert exact.item() == torch.log1p(first).item()
    with np.errstate(divide="ignore"):
        log_space = float(np.logaddexp(np.log(p_k), np.log1p(-p_k) + 2 * eps))
    assert exact.item() == pytest.approx(log_space, rel=1e-9, abs=1e-12)


def test_bound_shapes_name_both():
    with pytest.raises(ValueError, match=r"p \(3,\) and eps \(2,\) must broadcast"):
        mm.mismatch_bound(torch.full((3,), 0.5), torch.full((2,), 0.1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_low_precision_probabilities_accepted(dtype):
    """bf16/fp16/float32 softmax outputs are probabilities (dtype-aware tolerance)."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(4, 32_000, generator=g)                  # p >= ~1e-7: no fp16 underflow
    q = torch.softmax((z + 0.1 * torch.randn(4, 32_000, generator=g)).to(dtype), -1)
    p = torch.softmax(z.to(dtype), -1)
    kl = mm.kl_divergence(q, p)
    assert kl.shape == (4,) and torch.isfinite(kl).all()
    assert mm.mismatch_identity(p, torch.zeros(4, 32_000)).shape == (4, 32_000)
