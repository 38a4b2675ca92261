"""Symbolic derivations (sympy) of the exact softmax identities S1 and S2.

Source: LOPTI (S1, arXiv 2505.12929), OTB (S2, arXiv 2602.07078); the mismatch identities M1,
M2 built on the same helpers are in :mod:`tailtheory.mismatch.symbolic`.

Each function builds both sides of one identity for a small symbolic vocabulary (``V`` = 3 by
default, any ``V >= 2`` works but simplification slows quickly) and returns their difference
after simplification. A correct identity returns zero; the tests assert exactly that, so a
wrong statement shows up as a nonzero residual, not as a failing simplifier.

Notation: real symbols ``z_0..z_{V-1}`` (logits), ``p = softmax(z)``; the sampled token is
``k`` (an index).

Claims:
    S1  d log p_k / d z_j = [j = k] - p_j                               :func:`s1_residual`
    S2  ||e_k - p||^2 = 1 - 2 p_k + sum_j p_j^2                          :func:`s2_residual`
"""

from __future__ import annotations

import sympy as sp


def check_vocab(V: int, k: int) -> None:
    """Reject a vocabulary below 2 or a token index outside it (booleans and floats too)."""
    if isinstance(V, bool) or not isinstance(V, int) or V < 2:
        raise ValueError(f"V must be an integer >= 2, got {V!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < V:
        raise ValueError(f"k must be an integer in [0, {V}), got {k!r}")


def softmax_expr(z: list[sp.Expr]) -> list[sp.Expr]:
    """``p_j = e^{z_j} / sum_i e^{z_i}`` as sympy expressions."""
    S = sum(sp.exp(zi) for zi in z)
    return [sp.exp(zi) / S for zi in z]


def log_softmax_expr(z: list[sp.Expr], k: int) -> sp.Expr:
    """``log p_k = z_k - log sum_j e^{z_j}``, written so sympy never has to expand a log."""
    return z[k] - sp.log(sum(sp.exp(zi) for zi in z))


def s1_residual(V: int = 3, k: int = 0) -> sp.Matrix:
    """Residual of S1: ``d log p_k / dz_j - ([j = k] - p_j)`` for every ``j``, simplified.

    Source: LOPTI (S1). Shapes: -> sympy Matrix (V, 1), zero when the identity holds.
    """
    check_vocab(V, k)
    z = list(sp.symbols(f"z0:{V}", real=True))
    p = softmax_expr(z)
    logp_k = sp.log(p[k])
    rows = [sp.simplify(sp.diff(logp_k, z[j]) - (int(j == k) - p[j])) for j in range(V)]
    return sp.Matrix(rows)


def s2_residual(V: int = 3, k: int = 0) -> sp.Expr:
    """Residual of S2: ``sum_j ([j = k] - p_j)^2 - (1 - 2 p_k + sum_j p_j^2)``, expanded.

    Source: OTB (S2). The identity is polynomial and needs no normalisation, so ``p_j`` are free
    symbols here; it holds for any vector, in particular for a softmax. Shapes: -> scalar.
    """
    check_vocab(V, k)
    p = sp.symbols(f"p0:{V}", real=True)
    lhs = sum((int(j == k) - p[j]) ** 2 for j in range(V))
    rhs = 1 - 2 * p[k] + sum(pj ** 2 for pj in p)
    return sp.expand(lhs - rhs)
