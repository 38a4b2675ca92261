"""Symbolic derivations of S1 and S2 (tailtheory.softmax.symbolic)."""

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


def test_s1_residual_detects_a_wrong_identity():
    """S1: the simplification is not vacuous, a sign-flipped score stays nonzero."""
    z = list(sp.symbols("z0:3", real=True))
    p = sy.softmax_expr(z)
    flipped = sp.simplify(sp.diff(sp.log(p[0]), z[1]) - p[1])  # claims +p_j instead of -p_j
    assert flipped != 0


def test_log_softmax_expr_is_log_of_softmax():
    z = list(sp.symbols("z0:3", real=True))
    vals = {z[0]: 0.3, z[1]: -1.2, z[2]: 2.0}
    p = sy.softmax_expr(z)
    assert float(sy.log_softmax_expr(z, 2).subs(vals)) == pytest.approx(
        float(sp.log(p[2]).subs(vals)), rel=1e-14)


@pytest.mark.parametrize("V,k", [(1, 0), (3, 3), (3, -1), (2.0, 0), (3, True)])
def test_bad_vocab_or_token_rejected(V, k):
    with pytest.raises(ValueError, match="V must|k must"):
        sy.s1_residual(V, k)
