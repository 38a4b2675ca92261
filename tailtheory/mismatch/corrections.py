"""Per-token advantage weights, masks and pass splits used by the policy losses.

Pure formulas, one per paper idea; ``engine/losses.py`` wraps them in the method registry.

- LOPTI (L2) Advantage Reweighting ``A <- (alpha * pi_old + 1 - alpha) * A``.
- LOPTI (L3) Low-probability token isolation: split by ``pi_old < eta``, two passes.
- TIM (V4) mismatch corrections with ``r_t = pi_train(y_t) / pi_roll(y_t)``: token truncated IS
  ``min(r_t, C)``, sequence masking (MIS; product or geometric mean of ``r_t``), IcePop token
  masking (keep ``r_t`` inside a band).
- DVP (P3) the kept vocabulary ``S`` of the sampler, shared with the trainer
  (:func:`dvp_keep`; the rules live in ``tailtheory/pruning/vocab.py``).

Shapes: per-token tensors ``(B, T)`` with a bool ``mask (B, T)``; per-sequence ``(B,)``;
logits ``(B, T, V)``. Inputs must be finite (masked positions may hold 0, never NaN) and share
their shapes; a bad one is a ``ValueError`` naming it.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import check_finite, check_same_shape, check_tokens


def _check_token_pair(a: torch.Tensor, b: torch.Tensor, names: tuple[str, str]) -> None:
    """``a`` finite (masked positions may hold 0, never NaN) and of the shape of ``b``."""
    check_finite(a, names[0])
    check_same_shape(a, b, names)


def advantage_reweight(adv: torch.Tensor, old_logp: torch.Tensor, alpha: float) -> torch.Tensor:
    """Advantage Reweighting: damp the advantage of low-probability tokens.

    Source: LOPTI (L2). ``A_t <- (alpha * pi_old(y_t) + 1 - alpha) * A_t`` for both signs of
    ``A``, ``pi_old`` detached; ``alpha = 0`` is plain GRPO.
    Shapes: adv (B, T), old_logp (B, T) -> (B, T).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    check_finite(adv, "adv")
    _check_token_pair(old_logp, adv, ("old_logp", "adv"))
    pi_old = old_logp.detach().exp()
    return (alpha * pi_old + 1.0 - alpha) * adv


def lopti_passes(old_logp: torch.Tensor, mask: torch.Tensor, eta: float,
                 low_first: bool = True) -> list[tuple[str, torch.Tensor]]:
    """Low-probability token isolation: the token groups of the two update passes, in order.

    Source: LOPTI (L3). ``low = mask & (pi_old < eta)``, ``high = mask & (pi_old >= eta)``;
    the low group is updated first (``low_first=False`` is the reversed ablation).
    Shapes: old_logp (B, T), mask (B, T) -> [(name, (B, T) bool), (name, (B, T) bool)].
    """
    if not 0.0 < eta < 1.0:
        raise ValueError(f"eta must lie in (0, 1), got {eta}")
    _check_token_pair(old_logp, mask, ("old_logp", "mask"))
    low = mask & (old_logp.detach() < math.log(eta))
    high = mask & ~low
    return [("low", low), ("high", high)] if low_first else [("high", high), ("low", low)]


def tis_weight(log_r: torch.Tensor, cap: float) -> torch.Tensor:
    """Token-level truncated importance sampling weight ``min(r_t, C)``, detached.

    Source: TIM (V4). ``r_t = pi_train(y_t) / pi_roll(y_t) = exp(log_r)``.
    Shapes: log_r (B, T) -> (B, T).
    """
    if not cap > 0:
        raise ValueError(f"tis_cap must be > 0, got {cap}")
    check_finite(log_r, "log_r")
    return log_r.detach().exp().clamp(max=cap)


def seq_log_ratio(log_r: torch.Tensor, mask: torch.Tensor, geometric: bool) -> torch.Tensor:
    """Sequence log-ratio: ``sum_t log r_t`` (product) or its mean over tokens (geometric).

    Source: TIM (V4), MIS. Shapes: log_r (B, T), mask (B, T) -> (B,).
    """
    _check_token_pair(log_r, mask, ("log_r", "mask"))
    s = (log_r.detach() * mask).sum(-1)
    return s / mask.sum(-1).clamp(min=1) if geometric else s


def mis_keep(log_r: torch.Tensor, mask: torch.Tensor, low: float, high: float,
             geometric: bool = False) -> torch.Tensor:
    """Sequence masking: keep a response iff its sequence ratio lies in ``[low, high]``.

    Source: TIM (V4). ``R = prod_t r_t`` (or ``exp(mean_t log r_t)`` with ``geometric``).
    Shapes: log_r (B, T), mask (B, T) -> (B,) bool.
    """
    if not 0 <= low < high:
        raise ValueError(f"need 0 <= mis_low < mis_high, got {low}, {high}")
    seq = seq_log_ratio(log_r, mask, geometric)
    lo = math.log(low) if low > 0 else -math.inf
    return (seq >= lo) & (seq <= math.log(high))


def icepop_keep(log_r: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """IcePop token masking: keep a token iff ``low <= r_t <= high``.

    Source: TIM (V4). Shapes: log_r (B, T) -> (B, T) bool.
    """
    if not 0 < low < 1 < high:
        raise ValueError(f"need 0 < icepop_low < 1 < icepop_high, got {low}, {high}")
    check_finite(log_r, "log_r")
    lr = log_r.detach()
    return (lr >= math.log(low)) & (lr <= math.log(high))


def dvp_keep(roll_logits: torch.Tensor, tokens: torch.Tensor, rule: str, rho: float,
             temperature: float = 1.0) -> torch.Tensor:
    """The sampler's kept vocabulary ``S``, to be used unchanged by the trainer.

    Source: DVP (P3): pruning must use the same ``S`` on both sides, else every log-ratio is off
    by ``log pi(S|s)``. ``S = safe_vocab_mask(roll_logits / tau, rule, rho)``; the sampled token
    is always kept (a sampler that pruned on its own logits can only have sampled inside ``S``).
    Shapes: roll_logits (B, T, V), tokens (B, T) -> (B, T, V) bool.
    """
    from tailtheory.pruning.vocab import safe_vocab_mask

    check_finite(roll_logits, "roll_logits")
    tokens = check_tokens(tokens, roll_logits, "tokens")
    keep = safe_vocab_mask(roll_logits.detach().double() / temperature, rule, rho)
    return keep.scatter(-1, tokens.long().unsqueeze(-1), True)
