"""Symbolic derivations (sympy) of the exact softmax and mismatch identities.

Paper card
    LOPTI (S1), OTB (S2), DVP (M1, M2): see THEORY.md sections 1 and 2.

Each function builds both sides of one identity for a small symbolic vocabulary (``V`` = 3 by
default, any ``V >= 2`` works but simplification slows quickly) and returns their difference
after simplification. A correct identity returns zero; the tests assert exactly that, so a
wrong statement shows up as a nonzero residual, not as a failing simplifier.

Notation: real symbols ``z_0..z_{V-1}`` (logits), ``d_0..d_{V-1}`` (the mismatch direction of
M2, ``delta = eps * d``), ``p = softmax(z)``. The sampled token is ``k`` (an index).

Claims:
    S1  d log p_k / d z_j = [j = k] - p_j                               :func:`s1_residual`
    S2  ||e_k - p||^2 = 1 - 2 p_k + sum_j p_j^2                          :func:`s2_residual`
    M1  Delta_k = delta_k - log sum_j p_j e^{delta_j}; shift invariant   :func:`m1_residual`,
                                                                         :func:`m1_shift_residual`
    M2  Delta_k(eps d) = eps sum_{j != k} p_j (d_k - d_j) + O(eps^2)     :func:`m2_residual`
"""

from __future__ import annotations

import sympy as sp


def _check_vocab(V: int, k: int) -> None:
    if isinstance(V, bool) or not isinstance(V, int) or V < 2:
        raise ValueError(f"V must be an integer >= 2, got {V!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < V:
        raise ValueError(f"k must be an integer in [0, {V}), got {k!r}")


def softmax_expr(z: list[sp.Expr]) -> list[sp.Expr]:
    """``p_j = e^{z_j} / sum_i e^{z_i}`` as sympy expressions."""
    S = sum(sp.exp(zi) for zi in z)
    return [sp.exp(zi) / S for zi in z]


def _log_softmax(z: list[sp.Expr], k: int) -> sp.Expr:
    """``log p_k = z_k - log sum_j e^{z_j}``, written so sympy never has to expand a log."""
    return z[k] - sp.log(sum(sp.exp(zi) for zi in z))


def s1_residual(V: int = 3, k: int = 0) -> sp.Matrix:
    """Residual of S1: ``d log p_k / dz_j - ([j = k] - p_j)`` for every ``j``, simplified.

    Source: LOPTI (S1). Shapes: -> sympy Matrix (V, 1), zero when the identity holds.
    """
    _check_vocab(V, k)
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
    _check_vocab(V, k)
    p = sp.symbols(f"p0:{V}", real=True)
    lhs = sum((int(j == k) - p[j]) ** 2 for j in range(V))
    rhs = 1 - 2 * p[k] + sum(pj ** 2 for pj in p)
    return sp.expand(lhs - rhs)


def simplify_residual(expr: sp.Expr) -> sp.Expr:
    """Simplify a difference of log-sum-exp expressions: combine logs of positive terms, expand.

    ``force=True`` is sound here because every log argument is a sum of exponentials (> 0).
    """
    return sp.simplify(sp.expand_log(sp.logcombine(expr, force=True), force=True))


def mismatch_expr(z: list[sp.Expr], delta: list[sp.Expr], k: int) -> sp.Expr:
    """``Delta_k = log p'_k - log p_k`` with ``p' = softmax(z + delta)``, from the definition."""
    return _log_softmax([zi + di for zi, di in zip(z, delta)], k) - _log_softmax(z, k)


def m1_residual(V: int = 3, k: int = 0) -> sp.Expr:
    """Residual of M1: ``Delta_k - (delta_k - log sum_j p_j e^{delta_j})``, simplified.

    Source: DVP (M1). Shapes: -> scalar, zero when the identity holds.
    """
    _check_vocab(V, k)
    z = list(sp.symbols(f"z0:{V}", real=True))
    delta = list(sp.symbols(f"delta0:{V}", real=True))
    p = softmax_expr(z)
    closed = delta[k] - sp.log(sum(pj * sp.exp(dj) for pj, dj in zip(p, delta)))
    return simplify_residual(mismatch_expr(z, delta, k) - closed)


def m1_shift_residual(V: int = 3, k: int = 0) -> sp.Expr:
    """Residual of M1's invariance: ``Delta_k(delta + c) - Delta_k(delta)`` for a symbol ``c``.

    Source: DVP (M1). Shapes: -> scalar, zero when ``Delta`` ignores a common shift.
    """
    _check_vocab(V, k)
    z = list(sp.symbols(f"z0:{V}", real=True))
    delta = list(sp.symbols(f"delta0:{V}", real=True))
    c = sp.Symbol("c", real=True)
    shifted = mismatch_expr(z, [d + c for d in delta], k)
    return simplify_residual(shifted - mismatch_expr(z, delta, k))


def m2_residual(V: int = 3, k: int = 0) -> tuple[sp.Expr, sp.Expr]:
    """Residuals of M2's first-order expansion of ``Delta_k(eps d)`` around ``eps = 0``.

    Source: DVP (M2). Returns ``(Delta_k(0), dDelta_k/deps|_0 - sum_{j != k} p_j (d_k - d_j))``:
    the zeroth-order term must vanish and the first-order coefficient must be DVP's.
    Shapes: -> (scalar, scalar).
    """
    _check_vocab(V, k)
    z = list(sp.symbols(f"z0:{V}", real=True))
    d = list(sp.symbols(f"d0:{V}", real=True))
    eps = sp.Symbol("eps", real=True)
    p = softmax_expr(z)
    Delta = mismatch_expr(z, [eps * dj for dj in d], k)
    order0 = sp.simplify(Delta.subs(eps, 0))
    first = sp.diff(Delta, eps).subs(eps, 0)
    dvp = sum(p[j] * (d[k] - d[j]) for j in range(V) if j != k)
    return order0, sp.simplify(first - dvp)


def m2_second_order(V: int = 3, k: int = 0) -> sp.Expr:
    """The second-order coefficient ``(1/2) d^2 Delta_k / deps^2 |_0`` (the O(eps^2) term of M2).

    Source: DVP (M2). Simplifies to ``-(1/2) Var_p(d)`` (a check of that is in the tests).
    Shapes: -> scalar.
    """
    _check_vocab(V, k)
    z = list(sp.symbols(f"z0:{V}", real=True))
    d = list(sp.symbols(f"d0:{V}", real=True))
    eps = sp.Symbol("eps", real=True)
    Delta = mismatch_expr(z, [eps * dj for dj in d], k)
    return sp.simplify(sp.diff(Delta, eps, 2).subs(eps, 0) / 2)
