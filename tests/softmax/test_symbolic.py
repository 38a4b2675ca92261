"""Symbolic derivations of S1, S2, M1 and M2's first order (tailtheory.softmax.symbolic)."""

import pytest
import sympy as sp

from tailtheory.softmax import symbolic as sy


@pytest.mark.parametrize("V,k", [(3, 0), (3, 2), (4, 1)])
def test_s1_symbolic_score_is_e_k_minus_p(V, k):
    """S1: d log p_k / dz_j - ([j = k] - p_j) simplifies to zero for every j."""
    assert sy.s1_residual(V, k) == sp.zeros(V, 1)


@pytest.mark.parametrize("V,k", [(3, 0), (4, 3)])
def test_s2_symbolic_closed_form(V, k):
    """S2: ||e_k - p||^2 - (1 - 2 p_k + sum p^2) expands to zero."""
    assert sy.s2_residual(V, k) == 0


@pytest.mark.parametrize("V,k", [(3, 0), (4, 2)])
def test_m1_symbolic_identity_and_shift(V, k):
    """M1: Delta_k = delta_k - log sum_j p_j e^{delta_j}, and Delta ignores a common shift."""
    assert sy.m1_residual(V, k) == 0
    assert sy.m1_shift_residual(V, k) == 0


@pytest.mark.parametrize("V,k", [(3, 1), (4, 0)])
def test_m2_symbolic_first_order(V, k):
    """M2: Delta_k(0) = 0 and dDelta_k/deps at 0 = sum_{j != k} p_j (d_k - d_j)."""
    order0, order1 = sy.m2_residual(V, k)
    assert order0 == 0 and order1 == 0


def test_m2_second_order_is_minus_half_variance():
    """M2's O(eps^2) term is -(1/2) Var_p(d): nonzero, so the first order is not exact."""
    V = 3
    expr = sy.m2_second_order(V, 0)
    z, d = sp.symbols("z0:3", real=True), sp.symbols("d0:3", real=True)
    vals = {z[0]: 0.3, z[1]: -1.2, z[2]: 2.0, d[0]: 0.5, d[1]: -1.0, d[2]: 0.25}
    p = [sp.exp(vals[zi]) for zi in z]
    p = [pi / sum(p) for pi in p]
    mean = sum(pi * vals[di] for pi, di in zip(p, d))
    var = sum(pi * (vals[di] - mean) ** 2 for pi, di in zip(p, d))
    assert float(expr.subs(vals)) == pytest.approx(-0.5 * float(var), rel=1e-12)
    assert float(var) > 0


def test_residuals_detect_a_wrong_identity():
    """The simplification pipeline is not vacuous: a wrong M1 (uniform weights) stays nonzero,
    and so does a sign-flipped S1."""
    V, k = 3, 0
    z, delta = list(sp.symbols("z0:3", real=True)), list(sp.symbols("delta0:3", real=True))
    wrong = delta[k] - sp.log(sum(sp.exp(dj) for dj in delta) / V)
    assert sy.simplify_residual(sy.mismatch_expr(z, delta, k) - wrong) != 0
    p = sy.softmax_expr(z)
    flipped = sp.simplify(sp.diff(sp.log(p[k]), z[1]) - p[1])  # claims +p_j instead of -p_j
    assert flipped != 0


@pytest.mark.parametrize("V,k", [(1, 0), (3, 3), (3, -1), (2.0, 0), (3, True)])
def test_bad_vocab_or_token_rejected(V, k):
    with pytest.raises(ValueError, match="V must|k must"):
        sy.s1_residual(V, k)
