"""TIM's corrections of the training-inference mismatch: importance weights and rejections.

Source: TIM (V4), arXiv 2605.14220. Pure formulas on the mismatch log-ratio ``log_rho =
log pi_train(y_t) - log pi_roll(y_t)``, ``rho_t = exp(log_rho)``; ``tailtheory/tim/methods.py``
registers them as methods of the GRPO engine. Each remedy keeps the semantics of its source:

- token truncated IS, TIS: weight ``min(rho_t, C)`` (:func:`tis_weight`);
- sequence truncated IS: weight ``min(prod_t rho_t, C)`` on every token (:func:`seq_tis_weight`);
- masked IS, MIS: weight ``prod_t rho_t`` if it lies in ``[low, high]``, else 0
  (:func:`mis_weight`);
- IcePop: weight ``rho_t`` if it lies in ``[low, high]``, else 0 (:func:`icepop_weight`): the
  ratio is kept, it is not plain rejection;
- rejections, weight 1 when kept and 0 when dropped: a token band on ``rho_t``
  (:func:`icepop_keep`), a sequence band on ``prod_t rho_t`` (:func:`mis_keep`), a band on the
  geometric mean ``exp(mean_t log rho_t)`` (:func:`geo_keep`).

Every weight is detached: a constant factor on the surrogate, no gradient through ``rho`` (as
in verl's ``compute_rollout_correction_weights`` and TRL's ``vllm_importance_sampling_correction``).
Bands are compared in log space, so ``prod_t rho_t`` never overflows before the comparison.

LOPTI's reweighting and passes live in ``tailtheory/lopti/reweight.py``, DVP's shared kept set
in ``tailtheory/core/safeset.py``, TRM's sequence mask in ``tailtheory/core/estimators.py``
(``tailtheory.trm.mask.trm_mask``).

Shapes: per-token tensors ``(B, T)`` with a bool ``mask (B, T)``; per-sequence ``(B,)``.
Inputs must be finite (masked positions may hold 0, never NaN) and share their shapes; a bad one
is a ``ValueError`` naming it, and so is an empty or inverted band or a cap ``<= 0``.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import check_finite, check_mask


def _check_cap(cap: float, name: str) -> None:
    if not cap > 0:  # inf is allowed: plain (untruncated) IS
        raise ValueError(f"{name} must be > 0, got {cap}")


def _check_band(low: float, high: float, names: tuple[str, str]) -> None:
    """A non-empty band ``0 <= low < high`` (``low = 0``, ``high = inf``: one-sided)."""
    if not 0 <= low < high:
        raise ValueError(f"need 0 <= {names[0]} < {names[1]} (a non-empty band), got {low}, "
                         f"{high}")


def _in_band(log_x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """``low <= exp(log_x) <= high``, compared in log space. Shapes: any -> same, bool."""
    lo = math.log(low) if low > 0 else -math.inf
    return (log_x >= lo) & (log_x <= math.log(high))


def tis_weight(log_rho: torch.Tensor, cap: float) -> torch.Tensor:
    """Token-level truncated importance sampling weight ``min(rho_t, C)``, detached.

    Source: TIM (V4); TRL's ``token_truncate`` (with no lower clip): one truncated ratio per
    token. ``rho_t = pi_train(y_t) / pi_roll(y_t) = exp(log_rho)``.
    Shapes: log_rho (B, T) -> (B, T).
    """
    _check_cap(cap, "tis_cap")
    check_finite(log_rho, "log_rho")
    return log_rho.detach().exp().clamp(max=cap)


def seq_log_ratio(log_rho: torch.Tensor, mask: torch.Tensor, geometric: bool) -> torch.Tensor:
    """Sequence log-ratio: ``sum_t log rho_t`` (product) or its mean over tokens (geometric).

    Source: TIM (V4), MIS. Shapes: log_rho (B, T), mask (B, T) -> (B,).
    """
    check_finite(log_rho, "log_rho")
    mask = check_mask(mask, log_rho, allow_empty=True, like_name="log_rho")  # bool, or an error
    s = (log_rho.detach() * mask).sum(-1)
    return s / mask.sum(-1).clamp(min=1) if geometric else s


def seq_tis_weight(log_rho: torch.Tensor, mask: torch.Tensor, cap: float) -> torch.Tensor:
    """Sequence-level truncated importance sampling weight ``min(prod_t rho_t, C)``, detached.

    Source: TIM (V4); TRL's ``sequence_truncate`` (with no lower clip): one truncated ratio per
    sequence. Computed as ``exp(min(sum_t log rho_t, log C))``.
    Shapes: log_rho (B, T), mask (B, T) -> (B,).
    """
    _check_cap(cap, "seq_tis_cap")
    return seq_log_ratio(log_rho, mask, geometric=False).clamp(max=math.log(cap)).exp()


def mis_keep(log_rho: torch.Tensor, mask: torch.Tensor, low: float, high: float,
             geometric: bool = False) -> torch.Tensor:
    """Sequence rejection: keep a response iff its sequence ratio lies in ``[low, high]``.

    Source: TIM (V4): a band on the sequence's ratio ``R = prod_t rho_t`` (or, with
    ``geometric``, on its per-token geometric mean ``exp(mean_t log rho_t)``).
    Shapes: log_rho (B, T), mask (B, T) -> (B,) bool.
    """
    _check_band(low, high, ("mis_low", "mis_high"))
    return _in_band(seq_log_ratio(log_rho, mask, geometric), low, high)


def geo_keep(log_rho: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Geometric rejection: keep a response iff ``exp(mean_t log rho_t)`` lies in ``[low, high]``.

    Source: TIM (V4): a length-normalised sequence band, :func:`mis_keep` with ``geometric``.
    Shapes: log_rho (B, T), mask (B, T) -> (B,) bool.
    """
    _check_band(low, high, ("geo_low", "geo_high"))
    return _in_band(seq_log_ratio(log_rho, mask, geometric=True), low, high)


def mis_weight(log_rho: torch.Tensor, mask: torch.Tensor, low: float,
               high: float) -> torch.Tensor:
    """Masked importance sampling weight: ``prod_t rho_t`` inside ``[low, high]``, 0 outside.

    Source: TIM (V4); TRL's ``sequence_mask`` mode. Detached. A kept weight is at most ``high``
    (an infinite ``high`` is plain sequence IS on one side).
    Shapes: log_rho (B, T), mask (B, T) -> (B,).
    """
    _check_band(low, high, ("mis_low", "mis_high"))
    s = seq_log_ratio(log_rho, mask, geometric=False)
    keep = _in_band(s, low, high)
    return torch.where(keep, s.exp(), torch.zeros_like(s))


def icepop_keep(log_rho: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Token rejection: keep a token iff ``low <= rho_t <= high``.

    Source: TIM (V4): a band on each token's own ratio. Shapes: log_rho (B, T) -> (B, T) bool.
    """
    if not 0 < low < 1 < high:
        raise ValueError(f"need 0 < icepop_low < 1 < icepop_high, got {low}, {high}")
    check_finite(log_rho, "log_rho")
    return _in_band(log_rho.detach(), low, high)


def icepop_weight(log_rho: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """IcePop weight: ``rho_t`` inside ``[low, high]``, 0 outside (the ratio is kept).

    Source: TIM (V4), IcePop; TRL's ``token_mask`` mode. Detached.
    Shapes: log_rho (B, T) -> (B, T).
    """
    keep = icepop_keep(log_rho, low, high)
    lr = log_rho.detach()
    return torch.where(keep, lr.exp(), torch.zeros_like(lr))


__all__ = ["tis_weight", "seq_log_ratio", "seq_tis_weight", "mis_keep", "geo_keep", "mis_weight",
           "icepop_keep", "icepop_weight"]
