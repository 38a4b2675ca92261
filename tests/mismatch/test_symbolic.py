"""Symbolic derivations of M1 and M2's first and second order (tailtheory.mismatch.symbolic)."""

import pytest
import sympy as sp

from tailtheory.mismatch import symbolic as sy


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


def test_m1_residual_detects_a_wrong_identity():
    """M1: the simplification pipeline is not vacuous, a wrong M1 (uniform weights) stays
    nonzero."""
    V, k = 3, 0
    z, delta = list(sp.symbols("z0:3", real=True)), list(sp.symbols("delta0:3", real=True))
    wrong = delta[k] - sp.log(sum(sp.exp(dj) for dj in delta) / V)
    assert sy.simplify_residual(sy.mismatch_expr(z, delta, k) - wrong) != 0


@pytest.mark.parametrize("V,k", [(1, 0), (3, 3), (2.0, 0)])
def test_bad_vocab_or_token_rejected(V, k):
    with pytest.raises(ValueError, match="V must|k must"):
        sy.m1_residual(V, k)
