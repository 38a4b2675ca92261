"""LOPTI's two changes to the policy update: Advantage Reweighting and the two-pass schedule.

Source: LOPTI (L2, L3). ``tailtheory/lopti/methods.py`` registers them as the ``ar`` and
``lopti`` / ``lopti_reversed`` methods.

- L2 Advantage Reweighting ``A <- (alpha * pi_old + 1 - alpha) * A``.
- L3 Low-probability token isolation: split by ``pi_old < eta``, update the low group first.

Shapes: per-token tensors ``(B, T)`` with a bool ``mask (B, T)``. Inputs must be finite (masked
positions may hold 0, never NaN) and share their shapes; a bad one is a ``ValueError`` naming it.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import check_finite, check_mask, check_same_shape


def advantage_reweight(adv: torch.Tensor, old_logp: torch.Tensor, alpha: float) -> torch.Tensor:
    """Advantage Reweighting: damp the advantage of low-probability tokens.

    Source: LOPTI (L2). ``A_t <- (alpha * pi_old(y_t) + 1 - alpha) * A_t`` for both signs of
    ``A``, ``pi_old`` detached; ``alpha = 0`` is plain GRPO.
    Shapes: adv (B, T), old_logp (B, T) -> (B, T).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    return pi_old_reweight(adv, old_logp, alpha)


def pi_old_reweight(adv: torch.Tensor, old_logp: torch.Tensor, alpha: float) -> torch.Tensor:
    """``A_t <- (alpha * pi_old(y_t) + 1 - alpha) * A_t`` for any finite ``alpha``, ``pi_old``
    detached: Advantage Reweighting (L2, ``alpha`` in ``[0, 1]``) and, with ``alpha = -c``, the
    opposite upweighting of :func:`tailtheory.lopti.opposite.upweight_advantage`.
    Shapes: adv (B, T), old_logp (B, T) -> (B, T).
    """
    check_finite(adv, "adv")
    check_finite(old_logp, "old_logp")
    check_same_shape(old_logp, adv, ("old_logp", "adv"))
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
    check_finite(old_logp, "old_logp")
    mask = check_mask(mask, old_logp, allow_empty=True, like_name="old_logp")  # bool, or an error
    low = mask & (old_logp.detach() < math.log(eta))
    high = mask & ~low
    return [("low", low), ("high", high)] if low_first else [("high", high), ("low", low)]


__all__ = ["advantage_reweight", "pi_old_reweight", "lopti_passes"]
