"""Exact variance of token-level estimators on tabular policies (tailtheory.otb.variance):
O2 (OTB minimises the prefix surrogate), O3 (M^-1 c minimises the variance), O4, O6."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from strategies import tabular_policies
from tailtheory.otb.variance import (baseline_variance, exact_gradient, fd_gradient,
                                     group_estimates, group_quality, group_study, logit_scores,
                                     matching_group_size, optimal_baseline, population_baselines,
                                     prefix_sq_norms, prefix_surrogate, score_gram,
                                     surrogate_argmin_residuals, tabular_energy,
                                     variance_quadratic)
from tailtheory.core.tabular import TabularPolicy, random_rewards

FD_H = 1e-5
"""Central finite-difference step for dJ/dB (error O(h^2) on a quadratic: exact up to rounding)."""


def _dense_scores(pol: TabularPolicy, tied: bool = False) -> torch.Tensor:
    """Reference: every position's full score vector, (N, T, P*V [+ V])."""
    N, T = pol.seqs.shape
    P = pol.logits.shape[0]
    r = logit_scores(pol)
    out = torch.zeros(N, T, P, pol.V, dtype=torch.float64)
    for n in range(N):
        for t in range(T):
            out[n, t, pol.ctx[n, t]] = r[n, t]
    out = out.reshape(N, T, -1)
    return torch.cat([out, r], -1) if tied else out


def _dense_variance(pol, R, B):
    G = R[:, None] * pol.mask
    A = (G - B) * pol.mask
    g_n = torch.einsum("nt,ntd->nd", A, _dense_scores(pol))             # (N, D)
    mean = pol.seq_prob @ g_n
    return pol.seq_prob @ g_n.pow(2).sum(1) - mean.pow(2).sum(), mean


def _policy_and_reward(pol):
    return pol, random_rewards(pol, seed=pol.T * 7 + pol.V)


@given(tabular_policies(max_sequences=80, max_scale=5.0), st.integers(0, 2**31 - 1))
@example(TabularPolicy.random(3, 3, eos=1, sharpness=5.0, seed=3), 0)
def test_variance_and_gradient_equal_dense_reference(pol, seed):
    """V(B) and E[g_B] from the Gram equal the brute-force dense computation; E[g_B] = grad J
    (autograd of sum q R) for any B: the baseline adds no bias."""
    R = random_rewards(pol, seed=seed)
    B = torch.randn(pol.T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    v_ref, mean_ref = _dense_variance(pol, R, B)
    assert torch.allclose(baseline_variance(pol, R, B), v_ref, atol=1e-12, rtol=1e-10)
    z = pol.logits.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(pol.with_logits(z).seq_prob @ R, z)
    assert torch.allclose(exact_gradient(pol, R, B).flatten(), mean_ref, atol=1e-12)
    assert torch.allclose(exact_gradient(pol, R, B), grad, atol=1e-12)


@given(tabular_policies(max_sequences=80))
def test_o1_gram_is_diagonal_energy_for_tabular_policies(pol):
    """O1/O2: distinct positions of a sequence have orthogonal scores (disjoint context rows);
    the diagonal is w_t and the true prefix norms equal the proxy W_t."""
    gram = score_gram(pol)
    dense = _dense_scores(pol)
    assert torch.allclose(gram, torch.einsum("ntd,nud->ntu", dense, dense), atol=1e-12)
    off = gram - torch.diag_embed(torch.diagonal(gram, dim1=1, dim2=2))
    assert off.abs().max() == 0
    assert torch.allclose(prefix_sq_norms(gram, pol.mask), tabular_energy(pol) * pol.mask,
                          atol=1e-12)


@given(tabular_policies(max_sequences=300, max_scale=5.0))
def test_o2_otb_is_stationary_point_of_prefix_surrogate(pol):
    """O2: dJ/dB vanishes at OTB (true prefix norms); J is convex (J(B + d) >= J(B))."""
    pol, R = _policy_and_reward(pol)
    S2 = prefix_sq_norms(score_gram(pol), pol.mask)
    B = population_baselines(pol, R)["otb_true"]
    J = lambda b: prefix_surrogate(pol, R, b, S2)  # noqa: E731
    scale = float(pol.expect((S2).sum(-1))) + 1e-300
    assert fd_gradient(J, B, FD_H).abs().max() / scale < 1e-8
    d = torch.randn(pol.T, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert J(B + 0.1 * d) >= J(B) - 1e-15


def test_o2_closed_form_by_sympy():
    """O2: argmin_b sum_i a_i (g_i - b)^2 = sum a_i g_i / sum a_i, a minimum when sum a_i > 0."""
    assert surrogate_argmin_residuals(4) == (0, 0)


def test_o2_proxy_fails_without_orthogonality():
    """O2 assumption: with a logit bias shared by all contexts the proxy W_t is not the prefix
    norm and OTB with the proxy no longer zeroes dJ/dB (the true-norm OTB still does)."""
    pol = TabularPolicy.random(3, 3, sharpness=1.5, seed=4)
    R = random_rewards(pol, seed=1)
    S2 = prefix_sq_norms(score_gram(pol, tied=True), pol.mask)
    J = lambda b: prefix_surrogate(pol, R, b, S2)  # noqa: E731
    from tailtheory.otb.variance import weighted_baseline
    proxy = population_baselines(pol, R)["otb"]
    true = weighted_baseline(pol, R, S2)
    assert fd_gradient(J, true, FD_H).abs().max() < 1e-9
    assert fd_gradient(J, proxy, FD_H).abs().max() > 1e-4


@given(tabular_policies(max_sequences=300), st.integers(0, 2**31 - 1))
@example(TabularPolicy.random(3, 4, eos=0, sharpness=2.0, seed=1), 0)
def test_o3_optimal_baseline_minimises_variance(pol, seed):
    """O3 holds: V(B) >= V(M^-1 c) for every B (slack >= 0); it moves right:
    V(B* + d) - V(B*) = d'Md (exact quadratic); tight: V(M^-1 c)/V(M^-1 c) = 1 and OTB >= it."""
    pol, R = _policy_and_reward(pol)
    Bopt = optimal_baseline(pol, R)
    M, _, _ = variance_quadratic(pol, R)
    d = torch.randn(pol.T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    v0 = baseline_variance(pol, R, Bopt)
    v1 = baseline_variance(pol, R, Bopt + d)
    tol = 1e-10 * (1 + float(v0.abs()))
    assert v1 - v0 >= -tol
    assert torch.isclose(v1 - v0, d @ M @ d, atol=tol, rtol=1e-8)
    for name, B in population_baselines(pol, R).items():
        assert baseline_variance(pol, R, B) >= v0 - tol, name


@given(tabular_policies(max_sequences=300, max_scale=5.0))
def test_o3_optimum_is_token_energy_weighted_mean(pol):
    """O3 (tabular): M is diagonal, so M^-1 c = E[w_t G m] / E[w_t m] (per-token w, not W)."""
    pol, R = _policy_and_reward(pol)
    bl = population_baselines(pol, R)
    M, _, _ = variance_quadratic(pol, R)
    reach = torch.diagonal(M) > 1e-12
    assert torch.allclose(bl["opt"][reach], bl["token"][reach], atol=1e-8)


def test_o4_uniform_policy_makes_otb_the_mean():
    """O4 tightness witness: a uniform policy has constant w, so OTB = mean and the ratio is 1."""
    pol = TabularPolicy.random(3, 4, sharpness=0.0)
    R = random_rewards(pol, seed=2)
    bl = population_baselines(pol, R)
    assert torch.allclose(bl["otb"], bl["mean"], atol=1e-12)


def test_o4_counterexample_confirmed_by_dense_reference():
    """O4 refuted: the gradient-ascent witness (EOS) has V(OTB) > V(mean), recomputed with the
    brute-force dense scores; without EOS the same search does not cross 1."""
    from tailtheory.otb.variance import adversarial_otb_ratio
    ratio, pol, R = adversarial_otb_ratio(3, 3, eos=0, seed=0, steps=40)
    bl = population_baselines(pol, R)
    v_otb, _ = _dense_variance(pol, R, bl["otb"])
    v_mean, _ = _dense_variance(pol, R, bl["mean"])
    assert ratio > 1.5 and float(v_otb / v_mean) == pytest.approx(ratio, rel=1e-8)
    assert adversarial_otb_ratio(3, 3, eos=None, seed=0, steps=40)[0] <= 1 + 1e-9


# --- O6: finite groups --------------------------------------------------------------------------

def test_o6_group_estimates_average_to_exact_gradient_for_rloo():
    """RLOO is unbiased: over all ordered pairs (N = 2, exact enumeration) its mean is grad J."""
    pol = TabularPolicy.random(2, 2, sharpness=1.0, seed=0)
    R = random_rewards(pol, seed=0)
    n = pol.seqs.shape[0]
    idx = torch.cartesian_prod(torch.arange(n), torch.arange(n))         # (n^2, 2)
    q = pol.seq_prob[idx].prod(1)
    est = group_estimates(pol, R, idx, "rloo")
    assert torch.allclose(q @ est, exact_gradient(pol, R).flatten(), atol=1e-12)
    otb = group_estimates(pol, R, idx, "otb")
    assert (q @ otb - exact_gradient(pol, R).flatten()).norm() > 1e-3   # OTB's shrinkage bias
    with pytest.raises(ValueError, match="'ppo'; valid: grpo, dr_grpo, rloo, otb"):
        group_estimates(pol, R, idx, "ppo")


def test_o6_group_study_rows_and_matching():
    pol = TabularPolicy.random(3, 3, sharpness=1.0, seed=0)
    R = (random_rewards(pol, seed=0) < 0.4).double()
    rows = group_study(pol, R, Ns=(2, 8), n_groups=200, methods=("grpo", "rloo", "otb"))
    assert len(rows) == 6 and {r["method"] for r in rows} == {"grpo", "rloo", "otb"}
    by = {(r["method"], r["N"]): r for r in rows}
    assert by[("grpo", 8)]["cosine"] > by[("grpo", 2)]["cosine"]
    assert abs(by[("grpo", 8)]["cosine"] - by[("rloo", 8)]["cosine"]) < 1e-9  # same direction
    match = matching_group_size(rows, reference=("grpo", 8))
    assert match["grpo"] == 8
    q = group_quality(torch.zeros(3, 4, dtype=torch.float64), torch.ones(4, dtype=torch.float64))
    assert q["zero_frac"] == 1 and q["cosine"] == 0 and q["rel_mse"] == pytest.approx(1.0)


def test_bad_baseline_shape():
    pol = TabularPolicy.random(2, 2)
    with pytest.raises(ValueError, match="B must"):
        baseline_variance(pol, random_rewards(pol), torch.zeros(3))
