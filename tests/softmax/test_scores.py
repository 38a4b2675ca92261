"""Softmax facts S1-S4 (tailtheory.softmax.scores): identities, the S3 routes, the S4 wedge."""

import math
from unittest.mock import patch

import numpy as np
import pytest
import torch
from hypothesis import example, given, target
from hypothesis import strategies as st

from strategies import logits, logits_and_token, masked_logits
from tailtheory.core import stats
from tailtheory.softmax import scores as sm
from tailtheory.core.checks import ATOL_F64

LARGE_V = 4096
"""Largest vocabulary the property tests draw."""

OPEN_P = st.floats(1e-9, 1 - 1e-9)
"""Probabilities of the sampled token strictly inside (0, 1), edges included."""

RATIO_RTOL = 1e-6
"""A witness ratio may exceed 1 by rounding only: at p = 1 - 1e-9 the cancellation in 1 - p
costs about u / (1 - p) ~ 1e-7 relative."""


def _p_k(z, k):
    return torch.softmax(z, -1)[..., k]


# --- S1, S2 ---------------------------------------------------------------------------------

@given(logits_and_token(max_v=LARGE_V))
def test_s1_score_equals_autograd(zk):
    """S1: e_k - p equals d log p_k / dz from float64 autograd."""
    z, k = zk
    z = z.clone().requires_grad_(True)
    torch.log_softmax(z, -1)[k].backward()
    assert torch.allclose(sm.score(z.detach(), k), z.grad, rtol=0, atol=ATOL_F64)


def test_s1_batched_and_numpy_input():
    """S1 over (B, T, V) logits with (B, T) tokens; numpy in, float64 torch out."""
    z = np.random.default_rng(0).normal(size=(2, 3, 5)) * 4
    k = np.array([[0, 1, 4], [2, 2, 3]])
    s = sm.score(z, k)
    assert s.shape == (2, 3, 5) and s.dtype == torch.float64
    zero = torch.zeros(2, 3, dtype=torch.float64)
    assert torch.allclose(s.sum(-1), zero, atol=ATOL_F64)  # e_k - p sums to 0


@given(logits_and_token(max_v=LARGE_V))
def test_s2_closed_form_equals_norm(zk):
    """S2: 1 - 2 p_k + sum p^2 equals ||e_k - p||^2 formed explicitly."""
    z, k = zk
    assert abs(sm.score_sq_norm(z, k) - sm.score_norm(z, k) ** 2).item() <= ATOL_F64


def test_vocab_of_one_has_zero_score():
    """V = 1: p = 1, the score is the zero vector and both S4 bounds are zero."""
    z = torch.tensor([[3.7], [-80.0]], dtype=torch.float64)
    assert torch.equal(sm.score(z, [0, 0]), torch.zeros(2, 1, dtype=torch.float64))
    assert torch.equal(sm.score_sq_norm(z, [0, 0]), torch.zeros(2, dtype=torch.float64))
    lower, upper = sm.score_norm_bounds(torch.ones(2), 1)
    assert torch.equal(lower, torch.zeros(2, dtype=torch.float64)) and torch.equal(upper, lower)


# --- S3 -------------------------------------------------------------------------------------

@given(logits(max_v=LARGE_V, batch=(3,)))
def test_s3_lse_route_float64(z):
    """S3 in float64: exp(LSE(2z) - 2 LSE(z)) equals sum p^2 within 8 u (1 + ln V), graded
    against the extended-precision truth; the plain softmax code agrees within 1e-12."""
    truth = sm.sum_p_squared_longdouble(z)
    budget = sm.lse_budget(z.shape[-1], torch.float64)
    assert torch.allclose(sm.sum_p_squared(z), truth, rtol=budget, atol=0)
    assert torch.allclose(sm.sum_p_squared_reference(z), truth, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@given(z=logits(max_v=LARGE_V, batch=(4,)))
def test_s3_lse_route_low_precision(dtype, z):
    """S3 in float32 and bfloat16 (kept dtype): relative error within 8 u (1 + ln V)."""
    assert sm.sum_p_squared(z.to(dtype), keep_dtype=True).dtype == dtype
    rel = sm.s3_errors(z, dtype)["lse"]
    target(rel)
    assert rel <= sm.lse_budget(z.shape[-1], dtype)


def test_s3_raw_formula_breaks_in_bf16_with_offset():
    """S3's assumption: without max-centring, a logit offset of 50 ruins bf16 (error > budget);
    the centred route on the same logits stays inside it."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(64, 1000, generator=g, dtype=torch.float64) * 5 + 50
    err = sm.s3_errors(z, torch.bfloat16)
    budget = sm.lse_budget(1000, torch.bfloat16)
    assert err["lse_raw"] > budget
    assert err["lse"] <= budget


# --- S4: holds ------------------------------------------------------------------------------

@given(logits_and_token(max_v=LARGE_V))
@example((torch.tensor([0.0, -1e3, -1e3], dtype=torch.float64), 0))  # p_k = 1: all zero
@example((torch.tensor([-1e3, 0.0], dtype=torch.float64), 0))  # p_k = 0, V = 2: upper = lower
def test_s4_holds(zk):
    """S4: sqrt(V/(V-1))(1-p) <= ||e_k - p|| <= sqrt(2)(1-p) <= sqrt(2(1-p))."""
    z, k = zk
    norm = sm.score_norm(z, k)
    lower, upper = sm.score_norm_bounds(_p_k(z, k), z.shape[-1])
    target((norm / upper).item() if upper > 0 else 0.0, label="upper ratio")
    target((lower / norm).item() if norm > 0 else 0.0, label="lower ratio")
    slack = sm.s4_slacks(z[None], torch.tensor([k]))  # the S4 check's measurement
    assert min(slack.values()) >= -ATOL_F64, slack


# --- S4: moves right ------------------------------------------------------------------------

@given(logits_and_token(max_v=LARGE_V), st.floats(-1e3, 1e3))
def test_s4_score_is_shift_invariant(zk, c):
    """Adding a constant to every logit leaves the score (and hence its norm) unchanged."""
    z, k = zk
    assert torch.allclose(sm.score(z + c, k), sm.score(z, k), rtol=0, atol=1e-9)


@given(logits_and_token(max_v=256))
def test_s4_norm_decreases_as_p_k_rises(zk):
    """Raising z_k raises p_k and shrinks ||e_k - p|| (the rest keeps its proportions);
    the bounds shrink with 1 - p."""
    z, k = zk
    zs = z.repeat(6, 1)
    zs[:, k] += torch.linspace(0, 10, 6, dtype=torch.float64)
    norm, p = sm.score_norm(zs, torch.full((6,), k)), _p_k(zs, k)
    lower, upper = sm.score_norm_bounds(p, z.shape[-1])
    for x in (norm, lower, upper, sm.score_norm_bound_weak(p)):
        assert (x.diff() <= 1e-12).all()
    assert (p.diff() >= -1e-15).all()


def test_s4_zero_at_p_one_and_bounds_vanish():
    """Zero at zero: p_k = 1 gives norm 0, and every bound is 0 there, for any V."""
    for V in (1, 2, 50, LARGE_V):
        lower, upper = sm.score_norm_bounds(torch.ones(()), V)
        assert lower == 0 and upper == 0
    assert sm.score_norm_bound_weak(1.0) == 0


# --- S4: tight ------------------------------------------------------------------------------

@given(st.integers(2, LARGE_V), OPEN_P)
@example(2, 0.5)
@example(LARGE_V, 1e-9)
@example(3, 1 - 1e-9)
def test_s4_upper_witness_attains_bound(V, p):
    """Upper end attained: all remaining mass on one other token gives ratio >= 0.999."""
    ratio = sm.score_norm_witness_ratio(V, p, "upper")
    target(-ratio)  # search for the worst witness
    assert 0.999 <= ratio <= 1 + RATIO_RTOL


@given(st.integers(2, LARGE_V), OPEN_P)
@example(2, 0.5)
@example(LARGE_V, 1e-9)
@example(1000, 0.3)
def test_s4_lower_witness_attains_bound(V, p):
    """Lower end attained: remaining mass spread evenly gives ratio >= 0.999 (equality)."""
    ratio = sm.score_norm_witness_ratio(V, p, "lower")
    target(-ratio)
    assert 0.999 <= ratio <= 1 + RATIO_RTOL


def test_s4_witnesses_sit_at_opposite_ends():
    """The upper witness is not near the lower bound (V > 2), so the two are distinct extremes."""
    V, p = 16, 0.3
    up, lo = (sm.score_norm(sm.score_norm_witness(V, p, e), 0).item() for e in ("upper", "lower"))
    lower, upper = (b.item() for b in sm.score_norm_bounds(p, V))
    assert up == pytest.approx(upper, rel=1e-12) and lo == pytest.approx(lower, rel=1e-12)
    assert up > 1.3 * lo


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("fn", [sm.score, sm.score_norm, sm.score_sq_norm])
def test_non_finite_logits_rejected(fn, bad):
    with pytest.raises(ValueError, match="logits contains"):
        fn([0.0, bad, 1.0], 0)


def test_minus_inf_logit_is_a_masked_token():
    """A ``-inf`` logit is a token of probability 0: S1/S2 as if it were absent from p."""
    z = torch.tensor([0.0, -math.inf, 1.0], dtype=torch.float64)
    s = sm.score(z, 0)
    assert s[1] == 0 and torch.allclose(s[[0, 2]], sm.score(z[[0, 2]], 0), atol=ATOL_F64)
    assert sm.score_sq_norm(z, 0) == pytest.approx(sm.score_norm(z, 0).item() ** 2, abs=ATOL_F64)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_logits_rejected_s3(bad):
    with pytest.raises(ValueError, match="logits contains"):
        sm.sum_p_squared([0.0, bad])


@pytest.mark.parametrize("token", [3, -1])
def test_token_outside_vocab_rejected(token):
    with pytest.raises(ValueError, match=r"token must lie in \[0, 3\)"):
        sm.score([0.0, 1.0, 2.0], token)


def test_token_shape_mismatch_rejected():
    with pytest.raises(ValueError, match="token has shape"):
        sm.score_sq_norm(torch.zeros(2, 3, 5), torch.zeros(3, 2, dtype=torch.long))


def test_float_token_rejected():
    with pytest.raises(ValueError, match="integer token ids"):
        sm.score(torch.zeros(2, 4), torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("p", [-0.1, 1.5, math.nan])
def test_p_outside_unit_interval_rejected(p):
    with pytest.raises(ValueError, match="p "):
        sm.score_norm_bounds(p, 10)
    with pytest.raises(ValueError, match="p "):
        sm.score_norm_bound_weak(p)


@pytest.mark.parametrize("V", [0, -3, 2.5, True])
def test_bad_vocab_size_rejected(V):
    with pytest.raises(ValueError, match="vocab_size"):
        sm.score_norm_bounds(0.5, V)


def test_vocab_of_one_needs_p_one():
    """V = 1 with p < 1 is not a distribution: rejected, naming p (no division by V - 1)."""
    with pytest.raises(ValueError, match="p must be 1 when vocab_size is 1"):
        sm.score_norm_bounds([1.0, 0.4], 1)


@pytest.mark.parametrize("args,match", [((1, 0.5), "vocab_size"), ((4, 0.0), "p must"),
                                        ((4, 1.0), "p must"), ((4, 0.5, "middle"), "end must")])
def test_bad_witness_args_rejected(args, match):
    with pytest.raises(ValueError, match=match):
        sm.score_norm_witness(*args)


def test_scalar_logits_rejected():
    with pytest.raises(ValueError, match="vocabulary dimension"):
        sm.sum_p_squared(1.0)


# --- masked (-inf) logits and the chunked path ------------------------------------------------

@given(masked_logits(max_v=LARGE_V, batch=(3,)), st.data())
def test_s2_s3_with_minus_inf_equal_the_restricted_row(args, data):
    """S2/S3 with ``-inf`` entries equal the same formulas on each row's finite entries."""
    z, alive = args
    k = torch.stack([torch.as_tensor(data.draw(st.sampled_from(a.nonzero()[:, 0].tolist())))
                     for a in alive])                                  # a live token per row
    sq, sp2 = sm.score_sq_norm(z, k), sm.sum_p_squared(z)
    for i in range(z.shape[0]):
        zi, ki = z[i][alive[i]], int(alive[i][: int(k[i])].sum())      # k's index among live
        assert sq[i].item() == pytest.approx(sm.score_sq_norm(zi, ki).item(), abs=1e-12)
        assert sp2[i].item() == pytest.approx(sm.sum_p_squared(zi).item(), rel=1e-12)
    assert torch.isfinite(sq).all() and torch.isfinite(sm.score(z, k)).all()


@pytest.mark.parametrize("fn", [sm.score_sq_norm, sm.sum_p_squared, sm.score])
def test_all_minus_inf_row_rejected(fn):
    z = torch.zeros(2, 4, dtype=torch.float64)
    z[1] = -math.inf
    args = (z,) if fn is sm.sum_p_squared else (z, torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"logits has 1 row\(s\) whose every entry is -inf"):
        fn(*args)


@given(logits_and_token(max_v=300), st.sampled_from([(2, 3), (5,), (1, 1, 4)]))
def test_chunked_s1_s2_s3_equal_the_one_shot_code(zk, lead):
    """Every fast path has a slow reference: blocks of one row (CHUNK_ELEMENTS = 1) against the
    unchunked formulas, to rounding."""
    z0, _ = zk
    V = z0.shape[-1]
    g = torch.Generator().manual_seed(V)
    z = z0 + torch.randn(*lead, V, generator=g, dtype=torch.float64)
    k = torch.randint(V, lead, generator=g)
    with patch.object(stats, "CHUNK_ELEMENTS", 1):
        sq, sp2, sc = sm.score_sq_norm(z, k), sm.sum_p_squared(z), sm.score(z, k)
        sp2_32 = sm.sum_p_squared(z.float(), keep_dtype=True)
    torch.testing.assert_close(sq, sm.score_sq_norm_reference(z, k), rtol=0, atol=ATOL_F64)
    torch.testing.assert_close(sp2, sm.sum_p_squared_reference(z), rtol=1e-12, atol=ATOL_F64)
    e_k = torch.nn.functional.one_hot(k, V).double()
    torch.testing.assert_close(sc, e_k - torch.softmax(z, -1), rtol=0, atol=ATOL_F64)
    assert sp2_32.dtype == torch.float32 and sq.shape == sp2.shape == lead
    torch.testing.assert_close(sp2_32.double(), sp2, rtol=1e-4, atol=1e-6)


def test_float32_logits_are_not_copied_to_float64_whole():
    """The float64 conversion happens per block: a float32 input gives the float64 result of
    its exactly converted values."""
    z = torch.randn(3, 7, 50)
    k = torch.zeros(3, 7, dtype=torch.long)
    torch.testing.assert_close(sm.score_sq_norm(z, k), sm.score_sq_norm(z.double(), k),
                               rtol=0, atol=0)
