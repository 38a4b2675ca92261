"""Training-inference mismatch of token log-probabilities (DVP, TIM; claims M1-M6).

Source: DVP (Li et al., *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*,
arXiv 2512.23087) for the (1-p) law; TIM (Zhong et al., arXiv 2605.14220) for the sign
convention of the per-token mismatch and the k1/k2/k3 estimators.

Notation. The trainer computes logits ``z`` (probabilities ``p``); the inference engine computes
``z + delta`` (probabilities ``p'``). Every numerical source is folded into ``delta``.

Sign convention (used everywhere in tailtheory)::

    Delta_k = log p'_k - log p_k        (inference minus trainer)

TIM's ``delta_t = log pi_train - log pi_rollout`` is ``-Delta``.

Claims:

- M1 (exact) ``Delta_k = delta_k - log sum_j p_j e^{delta_j}``, invariant to ``delta + c``.
- M2 (first order) ``Delta_k = sum_{j != k} p_j (delta_k - delta_j) + O(||delta||^2)``, so
  ``|Delta_k| <= 2 eps (1 - p_k) + O(eps^2)`` when ``||delta||_inf <= eps``.
- M3 (exact) ``max_j |delta_j - delta_k| <= 2 eps`` implies
  ``|Delta_k| <= log(1 + (1 - p_k)(e^{2 eps} - 1)) <= (1 - p_k)(e^{2 eps} - 1)``.
- M4 (exact) ``E_{k ~ p'}[Delta_k] = KL(p' || p) >= 0``.
- M5 (second order, ``delta_j ~ N(0, sigma^2)`` i.i.d.)
  ``E[Delta_k | k sampled] ~ sigma^2 [(1 - p_k)^2 + sum_{j != k} p_j^2]
  - sigma^2 (1 - sum_j p_j^2) / 2``.
  Checked by Monte Carlo (:mod:`tailtheory.mismatch.selection`, with M4's selection-bias table).
- M6 ``log pi_train(y) / pi_infer(y) = -sum_t Delta_t``; its mean drifts linearly in the number
  of sampled tail tokens, not like ``sqrt(T)`` (simulated sequences:
  :mod:`tailtheory.mismatch.accumulation`).

Per-token KL estimators of a log-ratio (TIM; used by TRM's T12): ``k1``, ``k2``, ``k3``, which
live in :mod:`tailtheory.core.estimators` (the engine's monitors read them too) and stay
importable from here.
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import (check_broadcastable, check_logits, check_nonneg, check_probs,
                                    check_same_shape, check_unit_interval)
from tailtheory.core.stats import map_row_blocks

BOUND_ORDERS = ("exact", "first", "linear")
"""``exact``: M3's log form; ``first``: its first-order bound (1-p)(e^{2eps}-1); ``linear``:
M2's 2 eps (1-p) (valid only up to O(eps^2))."""


def logprob_mismatch(logits, perturbed_logits) -> torch.Tensor:
    """Per-token log mismatch of every vocabulary entry (M1, the exact quantity).

    Source: DVP (M1). ``Delta = log_softmax(z') - log_softmax(z)`` with ``z'`` the inference
    engine's logits. Sign: inference minus trainer (TIM's ``delta_t = -Delta``).
    ``-inf`` logits are masked tokens: one masked on both sides has ``Delta = 0`` (impossible
    under both, as ``tailtheory.pruning.sweep.remaining_mismatch`` counts it), one masked on one
    side only ``+-inf`` (a ratio with a zero); the other entries equal those of the rows
    restricted to their finite entries. Computed in float64 blocks of rows
    (``tailtheory.core.stats.map_row_blocks``), so the extra memory is the output and a few
    blocks, not several float64 copies of the logits.

    Shapes: logits (..., V), perturbed_logits (..., V) -> Delta (..., V), float64.
    """
    z, z_prime = _two_logits(logits, perturbed_logits)
    return map_row_blocks(_mismatch_rows, z, z_prime)


def _two_logits(logits, perturbed_logits) -> tuple[torch.Tensor, torch.Tensor]:
    """Both logit sets, checked, in their own dtype (blocks are converted to float64 later)."""
    z = check_logits(logits, "logits", dtype=None)
    z_prime = check_logits(perturbed_logits, "perturbed_logits", dtype=None)
    check_same_shape(z, z_prime, ("logits", "perturbed_logits"))
    return z, z_prime


def _mismatch_rows(z: torch.Tensor, z_prime: torch.Tensor) -> torch.Tensor:
    """M1 on a block ``(r, V)``: ``log_softmax(z') - log_softmax(z)``, 0 where both are -inf."""
    Delta = torch.log_softmax(z_prime.to(torch.float64), -1) - torch.log_softmax(
        z.to(torch.float64), -1)                                       # (r, V)
    return Delta.masked_fill_(Delta.isnan(), 0.0)  # NaN only from -inf - (-inf)


def mismatch_identity(p, delta) -> torch.Tensor:
    """The right-hand side of M1: ``Delta_k = delta_k - log sum_j p_j e^{delta_j}``.

    Source: DVP (M1). Computed stably as ``delta - logsumexp(log p + delta)``; tokens with
    ``p_j = 0`` drop out of the sum.

    Shapes: p (..., V) probabilities, delta (..., V) logit perturbation -> Delta (..., V).
    """
    p = check_probs(p, "p")
    delta = check_logits(delta, "delta", allow_masked=False)
    check_same_shape(p, delta, ("p", "delta"))
    log_Z = torch.logsumexp(torch.log(p) + delta, -1, keepdim=True)  # (..., 1)
    return delta - log_Z


def first_order_mismatch(p, delta) -> torch.Tensor:
    """M2's first-order term ``sum_{j != k} p_j (delta_k - delta_j) = delta_k - <p, delta>``.

    Source: DVP (M2). The remainder ``Delta - first_order_mismatch`` is O(||delta||^2).

    Shapes: p (..., V), delta (..., V) -> (..., V).
    """
    p = check_probs(p, "p")
    delta = check_logits(delta, "delta", allow_masked=False)
    check_same_shape(p, delta, ("p", "delta"))
    return delta - (p * delta).sum(-1, keepdim=True)


def mismatch_bound(p, eps, order: str = "exact") -> torch.Tensor:
    """Bound on ``|Delta_k|`` given the token's probability and the logit mismatch size (M2, M3).

    Source: DVP (M3 exact, derived; M2 first order). With ``max_j |delta_j - delta_k| <= 2 eps``
    (implied by ``||delta||_inf <= eps``)::

        exact:  log(1 + (1 - p_k)(e^{2 eps} - 1))
        first:  (1 - p_k)(e^{2 eps} - 1)          >= exact
        linear: 2 eps (1 - p_k)                   M2; exceeded by O(eps^2)

    Every form is finite for finite ``eps`` except where a real number exceeds float64's range:
    ``exact`` is ``log(p_k + (1 - p_k) e^{2 eps}) <= 2 eps``, evaluated as ``log1p(first)``
    while ``first`` is finite and as ``logaddexp(log p_k, log(1 - p_k) + 2 eps)`` beyond
    (eps > ~355), so it never overflows; ``first`` is exactly 0 at ``p_k = 1`` (no ``0 * inf``)
    and ``+inf`` only when ``(1 - p_k)(e^{2 eps} - 1)`` itself exceeds ~1.8e308, a bound that
    says nothing; ``linear`` never overflows.

    Shapes: p (...) probabilities of single tokens, eps broadcastable to p -> (...).
    """
    if order not in BOUND_ORDERS:
        raise ValueError(f"order must be one of {BOUND_ORDERS}, got {order!r}")
    p = check_unit_interval(p, "p")
    eps = check_nonneg(eps, "eps")
    check_broadcastable(p, eps, ("p", "eps"))
    q = 1 - p
    if order == "linear":
        return 2 * eps * q
    first = torch.where(q > 0, q * torch.expm1(2 * eps), 0.0)
    if order == "first":
        return first
    big = torch.logaddexp(torch.log(p), torch.log(q) + 2 * eps)       # log(p + q e^{2 eps})
    return torch.where(torch.isfinite(first), torch.log1p(first), big)


def mismatch_eps(delta, per: str = "token") -> torch.Tensor:
    """The ``eps`` that M3 needs, measured from a logit perturbation.

    Source: DVP (M3). ``per="token"``: ``eps_k = max_j |delta_j - delta_k| / 2`` (the tightest
    valid value for token k); ``per="position"``: ``(max_j delta_j - min_j delta_j) / 2`` for
    all tokens of the position (looser, valid for every k).

    Shapes: delta (..., V) -> (..., V) for ``token``, (...) for ``position``.
    """
    delta = check_logits(delta, "delta", allow_masked=False)
    hi = delta.max(-1, keepdim=True).values
    lo = delta.min(-1, keepdim=True).values
    if per == "token":
        return torch.maximum(hi - delta, delta - lo) / 2
    if per == "position":
        return ((hi - lo) / 2).squeeze(-1)
    raise ValueError(f"per must be 'token' or 'position', got {per!r}")


def sampled_mismatch_bias(logits, perturbed_logits) -> torch.Tensor:
    """Mean mismatch of the tokens the engine samples: ``E_{k ~ p'}[Delta_k]`` (M4).

    Source: DVP (M4). ``sum_k p'_k (log p'_k - log p_k)``; M4 says it equals ``KL(p' || p)``
    (:func:`kl_divergence`) and is therefore ``>= 0``. Tokens with ``p'_k = 0`` add 0; ``+inf``
    when ``p'`` has mass where ``p`` has none (a ``-inf`` trainer logit). Computed in float64
    blocks of rows: no ``(..., V)`` temporary.

    Shapes: logits (..., V), perturbed_logits (..., V) -> (...).
    """
    z, z_prime = _two_logits(logits, perturbed_logits)
    return map_row_blocks(_bias_rows, z, z_prime)


def _bias_rows(z: torch.Tensor, z_prime: torch.Tensor) -> torch.Tensor:
    """M4 on a block ``(r, V)``: ``sum_k p'_k Delta_k`` with ``0 * Delta = 0``."""
    p_prime = torch.softmax(z_prime.to(torch.float64), -1)             # (r, V)
    terms = p_prime * _mismatch_rows(z, z_prime)
    return torch.where(p_prime > 0, terms, 0.0).sum(-1)


def kl_divergence(q, p) -> torch.Tensor:
    """``KL(q || p) = sum_k q_k log(q_k / p_k)`` of probability vectors, with ``0 log 0 = 0``.

    Source: reference for M4. Raises when ``q`` puts mass where ``p`` has none (KL infinite).
    Computed in blocks of rows: no ``(..., V)`` temporary beyond the checked inputs.

    Shapes: q (..., V), p (..., V) -> (...).
    """
    q = check_probs(q, "q")
    p = check_probs(p, "p")
    check_same_shape(q, p, ("q", "p"))
    return map_row_blocks(_kl_rows, q, p)


def _kl_rows(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    if ((q > 0) & (p == 0)).any():
        raise ValueError("q puts mass on tokens where p is 0: KL(q || p) is infinite")
    terms = torch.where(q > 0, q * (torch.log(q) - torch.log(p)), torch.zeros_like(q))
    return terms.sum(-1)


def m3_witness(p_k: float, eps: float, V: int = 2, k: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """M3's extremal case: token ``k`` at probability ``p_k`` (the rest spread evenly over
    ``V - 1`` tokens), ``delta_k = -eps`` and every other ``delta_j = +eps``. There
    ``|Delta_k| = log(1 + (1 - p_k)(e^{2 eps} - 1))``: the exact bound is attained.

    Source: DVP (M3, tightness). Shapes: -> ``(p (V,), delta (V,))``.
    """
    if not isinstance(V, int) or V < 2:
        raise ValueError(f"V must be an int >= 2, got {V!r}")
    if not isinstance(k, int) or not 0 <= k < V:
        raise ValueError(f"k must be a token index in [0, {V}), got {k!r}")
    p_k = float(check_unit_interval(p_k, "p_k"))
    eps = float(check_nonneg(eps, "eps"))
    p = torch.full((V,), (1 - p_k) / (V - 1), dtype=torch.float64)
    p[k] = p_k
    delta = torch.full((V,), eps, dtype=torch.float64)
    delta[k] = -eps
    return p, delta


def worst_case_mismatch(p, k: int, eps: float, seed: int = 0) -> tuple[float, torch.Tensor]:
    """Search the ``delta`` maximising ``|Delta_k|`` given ``max_j |delta_j - delta_k| <= 2 eps``.

    Source: DVP (M3, tightness). Parameterises ``delta_j = 2 eps tanh(u_j)`` (``delta_k = 0``,
    allowed by M1's shift invariance) and runs L-BFGS on ``-|Delta_k|`` from a random start.
    Returns the ratio ``|Delta_k| / bound`` reached and the maximiser.

    Shapes: p (V,) -> (float, delta (V,)).
    """
    from scipy.optimize import minimize

    p = check_probs(p, "p")
    bound = float(mismatch_bound(p[k], eps, "exact"))
    if bound == 0:
        raise ValueError(f"the bound is 0 at p_k = {float(p[k]):g}, eps = {eps:g}: no ratio")
    others = torch.arange(p.shape[0]) != k

    def delta_of(u):
        d = torch.zeros_like(p)
        d[others] = 2 * eps * torch.tanh(torch.as_tensor(u))
        return d

    def loss(u):
        return -float(mismatch_identity(p, delta_of(u))[k].abs())

    u0 = torch.randn(int(others.sum()), generator=torch.Generator().manual_seed(seed),
                     dtype=torch.float64).numpy()
    res = minimize(loss, u0, method="L-BFGS-B")
    return -res.fun / bound, delta_of(res.x)
