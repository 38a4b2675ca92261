"""Symbolic derivations (sympy) of DVP's mismatch identities M1 and M2.

Source: DVP, Li et al., *Taming the Tail: Stable LLM RL via Dynamic Vocabulary Pruning*,
arXiv 2512.23087 (M1, M2). The numerical checks of the same claims are in
:mod:`tailtheory.mismatch.claims`; the softmax helpers are shared with
:mod:`tailtheory.softmax.symbolic`.

Each function builds both sides of one identity for a small symbolic vocabulary (``V`` = 3 by
default) and returns their difference after simplification: zero when the identity holds, so a
wrong statement shows up as a nonzero residual, not as a failing simplifier.

Notation: real symbols ``z_0..z_{V-1}`` (logits), ``delta_0..delta_{V-1}`` (the inference
engine's logit error), ``d_0..d_{V-1}`` (its direction in M2, ``delta = eps * d``),
``p = softmax(z)``; ``Delta_k = log p'_k - log p_k`` with ``p' = softmax(z + delta)``.

Claims:
    M1  Delta_k = delta_k - log sum_j p_j e^{delta_j}; shift invariant   :func:`m1_residual`,
                                                                         :func:`m1_shift_residual`
    M2  Delta_k(eps d) = eps sum_{j != k} p_j (d_k - d_j) + O(eps^2)     :func:`m2_residual`,
                                                                         :func:`m2_second_order`
"""

from __future__ import annotations

import sympy as sp

from tailtheory.softmax.symbolic import check_vocab, log_softmax_expr, softmax_expr


def simplify_residual(expr: sp.Expr) -> sp.Expr:
    """Simplify a difference of log-sum-exp expressions: combine logs of positive terms, expand.

    ``force=True`` is sound here because every log argument is a sum of exponentials (> 0).
    """
    return sp.simplify(sp.expand_log(sp.logcombine(expr, force=True), force=True))


def mismatch_expr(z: list[sp.Expr], delta: list[sp.Expr], k: int) -> sp.Expr:
    """``Delta_k = log p'_k - log p_k`` with ``p' = softmax(z + delta)``, from the definition."""
    return log_softmax_expr([zi + di for zi, di in zip(z, delta)], k) - log_softmax_expr(z, k)


def m1_residual(V: int = 3, k: int = 0) -> sp.Expr:
    """Residual of M1: ``Delta_k - (delta_k - log sum_j p_j e^{delta_j})``, simplified.

    Source: DVP (M1). Shapes: -> scalar, zero when the identity holds.
    """
    check_vocab(V, k)
    z = list(sp.symbols(f"z0:{V}", real=True))
    delta = list(sp.symbols(f"delta0:{V}", real=True))
    p = softmax_expr(z)
    closed = delta[k] - sp.log(sum(pj * sp.exp(dj) for pj, dj in zip(p, delta)))
    return simplify_residual(mismatch_expr(z, delta, k) - closed)


def m1_shift_residual(V: int = 3, k: int = 0) -> sp.Expr:
    """Residual of M1's invariance: ``Delta_k(delta + c) - Delta_k(delta)`` for a symbol ``c``.

    Source: DVP (M1). Shapes: -> scalar, zero when ``Delta`` ignores a common shift.
    """
    check_vocab(V, k)
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
    check_vocab(V, k)
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
    check_vocab(V, k)
    z = list(sp.symbols(f"z0:{V}", real=True))
    d = list(sp.symbols(f"d0:{V}", real=True))
    eps = sp.Symbol("eps", real=True)
    Delta = mismatch_expr(z, [eps * dj for dj in d], k)
    return sp.simplify(sp.diff(Delta, eps, 2).subs(eps, 0) / 2)
