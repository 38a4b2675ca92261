"""TIM's corrections of the training-inference mismatch: token weights and masks.

Source: TIM (V4). Pure formulas on the mismatch log-ratio ``log_rho = log pi_train(y_t) -
log pi_roll(y_t)``, ``r_t = exp(log_rho)``; ``tailtheory/engine/methods.py`` registers them as
the ``tis``, ``mis`` and ``icepop`` methods.

- token truncated IS ``min(r_t, C)`` (:func:`tis_weight`);
- sequence masking, MIS: keep a response iff the product (or geometric mean) of its ``r_t`` lies
  in a band (:func:`mis_keep`);
- IcePop token masking: keep a token iff ``r_t`` lies in a band (:func:`icepop_keep`).

LOPTI's reweighting and passes live in ``tailtheory/lopti/reweight.py``, DVP's shared kept set
in ``tailtheory/pruning/sampler.py``, TRM's sequence mask in ``tailtheory/trm/mask.py``.

Shapes: per-token tensors ``(B, T)`` with a bool ``mask (B, T)``; per-sequence ``(B,)``.
Inputs must be finite (masked positions may hold 0, never NaN) and share their shapes; a bad one
is a ``ValueError`` naming it.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import check_finite, check_same_shape


def tis_weight(log_rho: torch.Tensor, cap: float) -> torch.Tensor:
    """Token-level truncated importance sampling weight ``min(r_t, C)``, detached.

    Source: TIM (V4). ``r_t = pi_train(y_t) / pi_roll(y_t) = exp(log_rho)``.
    Shapes: log_rho (B, T) -> (B, T).
    """
    if not cap > 0:
        raise ValueError(f"tis_cap must be > 0, got {cap}")
    check_finite(log_rho, "log_rho")
    return log_rho.detach().exp().clamp(max=cap)


def seq_log_ratio(log_rho: torch.Tensor, mask: torch.Tensor, geometric: bool) -> torch.Tensor:
    """Sequence log-ratio: ``sum_t log r_t`` (product) or its mean over tokens (geometric).

    Source: TIM (V4), MIS. Shapes: log_rho (B, T), mask (B, T) -> (B,).
    """
    check_finite(log_rho, "log_rho")
    check_same_shape(log_rho, mask, ("log_rho", "mask"))
    s = (log_rho.detach() * mask).sum(-1)
    return s / mask.sum(-1).clamp(min=1) if geometric else s


def mis_keep(log_rho: torch.Tensor, mask: torch.Tensor, low: float, high: float,
             geometric: bool = False) -> torch.Tensor:
    """Sequence masking: keep a response iff its sequence ratio lies in ``[low, high]``.

    Source: TIM (V4). ``R = prod_t r_t`` (or ``exp(mean_t log r_t)`` with ``geometric``).
    Shapes: log_rho (B, T), mask (B, T) -> (B,) bool.
    """
    if not 0 <= low < high:
        raise ValueError(f"need 0 <= mis_low < mis_high, got {low}, {high}")
    seq = seq_log_ratio(log_rho, mask, geometric)
    lo = math.log(low) if low > 0 else -math.inf
    return (seq >= lo) & (seq <= math.log(high))


def icepop_keep(log_rho: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """IcePop token masking: keep a token iff ``low <= r_t <= high``.

    Source: TIM (V4). Shapes: log_rho (B, T) -> (B, T) bool.
    """
    if not 0 < low < 1 < high:
        raise ValueError(f"need 0 < icepop_low < 1 < icepop_high, got {low}, {high}")
    check_finite(log_rho, "log_rho")
    lr = log_rho.detach()
    return (lr >= math.log(low)) & (lr <= math.log(high))


__all__ = ["tis_weight", "seq_log_ratio", "mis_keep", "icepop_keep"]
