"""Softmax facts S1-S5 (tailtheory.softmax.scores): identities, the S4 wedge, S5 through a tiny LM."""

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, target
from hypothesis import strategies as st

from strategies import logits, logits_and_token
from tailtheory.softmax import scores as sm
from tailtheory.core.checks import ATOL_F64
from tailtheory.softmax.claims import lse_budget

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
    budget = lse_budget(z.shape[-1], torch.float64)
    assert torch.allclose(sm.sum_p_squared(z), truth, rtol=budget, atol=0)
    assert torch.allclose(sm.sum_p_squared_reference(z), truth, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@given(z=logits(max_v=LARGE_V, batch=(4,)))
def test_s3_lse_route_low_precision(dtype, z):
    """S3 in float32 and bfloat16 (kept dtype): relative error within 8 u (1 + ln V)."""
    zd = z.to(dtype)
    got = sm.sum_p_squared(zd, keep_dtype=True)
    assert got.dtype == dtype
    truth = sm.sum_p_squared_longdouble(zd)
    rel = ((got.double() - truth).abs() / truth).max().item()
    target(rel)
    assert rel <= lse_budget(z.shape[-1], dtype)


def test_s3_raw_formula_breaks_in_bf16_with_offset():
    """S3's assumption: without max-centring, a logit offset of 50 ruins bf16 (error > budget);
    the centred route on the same logits stays inside it."""
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(64, 1000, generator=g, dtype=torch.float64) * 5 + 50).bfloat16()
    truth = sm.sum_p_squared_longdouble(z)
    raw = sm.sum_p_squared(z, keep_dtype=True, center=False).double()
    centred = sm.sum_p_squared(z, keep_dtype=True).double()
    budget = lse_budget(1000, torch.bfloat16)
    assert ((raw - truth).abs() / truth).max() > budget
    assert ((centred - truth).abs() / truth).max() <= budget


# --- S4: holds ------------------------------------------------------------------------------

@given(logits_and_token(max_v=LARGE_V))
@example((torch.tensor([0.0, -1e3, -1e3], dtype=torch.float64), 0))  # p_k = 1: all zero
@example((torch.tensor([-1e3, 0.0], dtype=torch.float64), 0))  # p_k = 0, V = 2: upper = lower
def test_s4_holds(zk):
    """S4: sqrt(V/(V-1))(1-p) <= ||e_k - p|| <= sqrt(2)(1-p) <= sqrt(2(1-p))."""
    z, k = zk
    V, p = z.shape[-1], _p_k(z, k)
    norm = sm.score_norm(z, k)
    lower, upper = sm.score_norm_bounds(p, V)
    target((norm / upper).item() if upper > 0 else 0.0, label="upper ratio")
    target((lower / norm).item() if norm > 0 else 0.0, label="lower ratio")
    assert norm >= lower - ATOL_F64
    assert norm <= upper + ATOL_F64
    assert upper <= sm.score_norm_bound_weak(p) + ATOL_F64


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
    z = sm.score_norm_witness(V, p, "upper")
    ratio = (sm.score_norm(z, 0) / sm.score_norm_bounds(_p_k(z, 0), V)[1]).item()
    target(-ratio)  # search for the worst witness
    assert 0.999 <= ratio <= 1 + RATIO_RTOL


@given(st.integers(2, LARGE_V), OPEN_P)
@example(2, 0.5)
@example(LARGE_V, 1e-9)
@example(1000, 0.3)
def test_s4_lower_witness_attains_bound(V, p):
    """Lower end attained: remaining mass spread evenly gives ratio >= 0.999 (equality)."""
    z = sm.score_norm_witness(V, p, "lower")
    ratio = (sm.score_norm_bounds(_p_k(z, 0), V)[0] / sm.score_norm(z, 0)).item()
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

@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("fn", [sm.score, sm.score_norm, sm.score_sq_norm])
def test_non_finite_logits_rejected(fn, bad):
    with pytest.raises(ValueError, match="logits contains"):
        fn([0.0, bad, 1.0], 0)


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


# --- S5: the wedge through a tiny transformer -----------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    """A float64 1-layer tiny LM, V = 16 <= H = 32, sharpened head; rows for 4 positions."""
    from tailtheory.core.models import tiny_lm

    model = tiny_lm(vocab_size=16, hidden=32, layers=1, heads=2, kv_heads=1, seed=3).double()
    with torch.no_grad():
        model.lm_head.weight.mul_(sm.S5_SHARPEN)
    ids = torch.randint(16, (4,), generator=torch.Generator().manual_seed(3))
    rows = sm.activation_wedge(model, ids, 3, torch.Generator().manual_seed(4))
    return model, ids, rows


def _loop_reference(model, ids, module, t, k):
    """Slow reference: one sequence, J row by row, the gradient of log p_k by plain autograd."""
    box = {}

    def swap(mod, inp, out):
        box["a"] = out.detach().requires_grad_(True)
        return box["a"]

    h = module.register_forward_hook(swap)
    z = model(input_ids=ids[None]).logits[0, t]  # (V,)
    h.remove()
    J = torch.stack([torch.autograd.grad(z[v], box["a"], retain_graph=True)[0][0, t]
                     for v in range(z.shape[0])])  # (V, H)
    g = torch.autograd.grad(torch.log_softmax(z, -1)[k], box["a"])[0][0, t]
    return J, g


def test_s5_batched_jacobians_match_loop_reference(tiny):
    """S5 fast path (a batch of T copies, one backward) equals the per-position loop."""
    model, ids, rows = tiny
    mods = sm.layer_modules(model)
    L, T, m = len(mods), ids.shape[0], 3
    r = {key: v.reshape(L, T, m) for key, v in rows.items()}
    for li, (_, module) in enumerate(mods):
        for t in range(T):
            J, g = _loop_reference(model, ids, module, t, int(r["k"][li, t, 0]))
            s = torch.linalg.svdvals(J)
            assert r["J_norm"][li, t, 0] == pytest.approx(s[0].item(), rel=1e-9)
            assert r["J_smin"][li, t, 0] == pytest.approx(s[-1].item(), rel=1e-9)
            assert r["grad_norm"][li, t, 0] == pytest.approx(g.norm().item(), rel=1e-9)


def test_s5_every_token_inside_its_wedge(tiny):
    """S5: ||grad_a log p_k|| within [sigma_min sqrt(V/(V-1)), ||J|| sqrt 2] (1-p), every layer;
    the gradient is J^T (e_k - p) up to the float32 casts inside RMSNorm."""
    _, _, rows = tiny
    for s in sm.wedge_summary(rows, 16):
        assert s["frac_inside"] == 1.0
        assert s["upper_ratio_max"] <= 1 + sm.WEDGE_RTOL
        assert s["lower_ratio_min"] >= 1 - sm.WEDGE_RTOL
        assert s["chain_err_max"] < 1e-6
        assert 0 < s["c_lo"] <= s["c_hi"]


def test_s5_wedge_test_can_fail(tiny):
    """Scaling the gradients out of the wedge is caught at both ends."""
    _, _, rows = tiny
    for factor in (1e3, 1e-3):
        bad = dict(rows, grad_norm=rows["grad_norm"] * factor)
        assert min(s["frac_inside"] for s in sm.wedge_summary(bad, 16)) < 1.0


def test_s5_rank_deficient_jacobian_has_upper_end_only():
    """V > H: J cannot have full row rank; sigma_min is reported 0 and only the upper end binds."""
    rows, names = sm.tiny_lm_wedge(vocab_size=48, hidden=16, T=3, n_tokens=2)
    assert (rows["J_smin"] == 0).all() and names[0] == "embed" and names[-1] == "final_norm"
    for s in sm.wedge_summary(rows, 48):
        assert s["frac_inside"] == 1.0 and s["lower_ratio_min"] == math.inf


@pytest.mark.parametrize("ids", [[], [[1, 2], [3, 4]], [0.5, 1.0]])
def test_s5_bad_input_ids_rejected(tiny, ids):
    model, _, _ = tiny
    with pytest.raises(ValueError, match="input_ids"):
        sm.activation_wedge(model, torch.tensor(ids))


def test_s5_leaves_parameter_grads_alone(tiny):
    """Measuring the wedge does not accumulate parameter gradients."""
    model, _, _ = tiny
    assert all(p.grad is None for p in model.parameters())


def test_layer_modules_rejects_other_models():
    with pytest.raises(ValueError, match="Qwen2/Llama-style"):
        sm.layer_modules(torch.nn.Linear(3, 3))


def test_plots_return_figure_and_data(tiny):
    """The S4 and S5 figures come with their data; the S4 witnesses sit on the bound lines."""
    import matplotlib.pyplot as plt

    from tailtheory.softmax.figures import plot_layer_wedge, plot_score_norm

    fig, df = plot_score_norm(n=40, vocab_size=32)
    up = df[df.kind == "upper_witness"]
    assert np.allclose(up.score_norm, up.upper, rtol=1e-9)
    assert {"p", "score_norm", "lower", "upper", "weak"} <= set(df.columns)
    plt.close(fig)
    model, _, rows = tiny
    names = [n for n, _ in sm.layer_modules(model)]
    fig, df = plot_layer_wedge(rows, names, vocab_size=16)
    assert len(df) == len(rows["p"]) and set(df.layer) == set(names)
    assert (df.grad_norm <= df.upper * (1 + sm.WEDGE_RTOL)).all()
    plt.close(fig)
