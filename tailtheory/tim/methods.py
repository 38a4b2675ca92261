"""TIM's corrections as methods of the GRPO engine: importance weights and rejections on ``rho``.

Source: TIM (V4), arXiv 2605.14220. Thin adapters from ``(PolicyBatch, MethodParams)`` to the
formulas of :mod:`tailtheory.tim.corrections`, registered at the ``correction`` stage with
:func:`tailtheory.engine.registry.register` (the registry imports this module when it looks the
methods up): ``tis``, ``seq_tis``, ``mis``, ``seq_reject``, ``geo_reject``, ``icepop``,
``token_reject``. They share one check of their caps and bands (:func:`check_corrections`).

``rho_t = pi_train / pi_roll = exp(b.log_rho)``. Every weight is detached (a constant factor on
the surrogate, as in verl and TRL); sequence weights are broadcast to the sequence's tokens.
Shapes: ``B`` sequences, ``T`` response tokens.
"""

from __future__ import annotations

import torch

from tailtheory.core.stats import masked_mean
from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.tim.corrections import (geo_keep, icepop_keep, icepop_weight, mis_keep,
                                        mis_weight, seq_tis_weight, tis_weight)


def check_corrections(hp: MethodParams) -> None:
    """TIM's remedies: caps > 0 (inf: plain IS) and non-empty bands (low < high); the token
    band holds 1 (``icepop_low < 1 < icepop_high``). Raises ``ValueError``."""
    for name in ("tis_cap", "seq_tis_cap"):
        if not getattr(hp, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(hp, name)}")
    for low, high in (("mis_low", "mis_high"), ("geo_low", "geo_high")):
        lo, hi = getattr(hp, low), getattr(hp, high)
        if not 0 <= lo < hi:  # an upper bound of inf masks on one side only
            raise ValueError(f"need 0 <= {low} < {high} (a non-empty band), got {lo}, {hi}")
    if not 0 < hp.icepop_low < 1 < hp.icepop_high:
        raise ValueError(f"need 0 < icepop_low < 1 < icepop_high, got {hp.icepop_low}, "
                         f"{hp.icepop_high}")


def _per_token(seq_w: torch.Tensor, b: PolicyBatch) -> torch.Tensor:
    """A per-sequence weight (B,) on every token of its sequence. Shapes: (B,) -> (B, T)."""
    return seq_w[:, None].to(b.old_logp.dtype).expand_as(b.old_logp)


@register("tis", "correction", "TIM (V4), token TIS",
          metrics=("tis/weight_mean", "tis/trunc_frac"), validate=check_corrections)
def tis(b: PolicyBatch, hp: MethodParams):
    """Token truncated importance sampling: weight min(rho_t, tis_cap), detached.

    Source: TIM (V4); TRL's ``token_truncate``: one truncated ratio per token.
    Shapes: (B, T) -> weight (B, T).
    """
    w = tis_weight(b.log_rho, hp.tis_cap)
    return w, {"tis/weight_mean": masked_mean(w, b.mask),
               "tis/trunc_frac": masked_mean(b.log_rho.exp() > hp.tis_cap, b.mask)}


@register("seq_tis", "correction", "TIM (V4), sequence TIS",
          metrics=("seq_tis/weight_mean", "seq_tis/trunc_frac"), validate=check_corrections)
def seq_tis(b: PolicyBatch, hp: MethodParams):
    """Sequence truncated importance sampling: weight min(prod_t rho_t, seq_tis_cap), detached.

    Source: TIM (V4); TRL's ``sequence_truncate``: one truncated ratio per sequence. Metrics
    over sequences: the mean weight, the fraction truncated at the cap.
    Shapes: (B, T) -> weight (B, T), one value per sequence.
    """
    w = seq_tis_weight(b.log_rho, b.mask, hp.seq_tis_cap)                # (B,)
    return _per_token(w, b), {"seq_tis/weight_mean": float(w.double().mean()),
                              "seq_tis/trunc_frac": float((w >= hp.seq_tis_cap).double().mean())}


@register("mis", "correction", "TIM (V4), masked IS",
          metrics=("mis/reject_rate", "mis/weight_mean"), validate=check_corrections)
def mis(b: PolicyBatch, hp: MethodParams):
    """Masked importance sampling: weight prod_t rho_t inside [mis_low, mis_high], 0 outside.

    Source: TIM (V4); TRL's ``sequence_mask``. Detached. Metrics over sequences: the rejected
    fraction, the mean weight (0 for rejected).
    Shapes: (B, T) -> weight (B, T), one value per sequence.
    """
    w = mis_weight(b.log_rho, b.mask, hp.mis_low, hp.mis_high)            # (B,)
    keep = mis_keep(b.log_rho, b.mask, hp.mis_low, hp.mis_high)          # (B,) bool
    return _per_token(w, b), {"mis/reject_rate": 1.0 - float(keep.double().mean()),
                              "mis/weight_mean": float(w.double().mean())}


@register("seq_reject", "correction", "TIM (V4), sequence rejection",
          metrics=("seq_reject/reject_rate",), validate=check_corrections)
def seq_reject(b: PolicyBatch, hp: MethodParams):
    """Sequence rejection: weight 1 if prod_t rho_t lies in [mis_low, mis_high], else 0.

    Source: TIM (V4): a band on the whole sequence's ratio. A rejected sequence still counts in
    the loss's denominators here (a framework that drops it from its response mask divides by
    the kept ones). Shapes: (B, T) -> weight (B, T), one value per sequence.
    """
    keep = mis_keep(b.log_rho, b.mask, hp.mis_low, hp.mis_high)          # (B,) bool
    return _per_token(keep, b), {"seq_reject/reject_rate": 1.0 - float(keep.double().mean())}


@register("geo_reject", "correction", "TIM (V4), geometric rejection",
          metrics=("geo_reject/reject_rate",), validate=check_corrections)
def geo_reject(b: PolicyBatch, hp: MethodParams):
    """Geometric rejection: weight 1 if exp(mean_t log rho_t) is in [geo_low, geo_high], else 0.

    Source: TIM (V4): a length-normalised sequence band (on the per-token geometric mean of
    ``rho``). Shapes: (B, T) -> weight (B, T), one value per sequence.
    """
    keep = geo_keep(b.log_rho, b.mask, hp.geo_low, hp.geo_high)          # (B,) bool
    return _per_token(keep, b), {"geo_reject/reject_rate": 1.0 - float(keep.double().mean())}


@register("icepop", "correction", "TIM (V4), IcePop",
          metrics=("icepop/mask_frac", "icepop/weight_mean"), validate=check_corrections)
def icepop(b: PolicyBatch, hp: MethodParams):
    """IcePop: weight rho_t inside [icepop_low, icepop_high], 0 outside (the ratio is kept).

    Source: TIM (V4), IcePop; TRL's ``token_mask``. Detached. Metrics over response tokens: the
    masked fraction, the mean weight. Shapes: (B, T) -> weight (B, T).
    """
    w = icepop_weight(b.log_rho, hp.icepop_low, hp.icepop_high).to(b.old_logp.dtype)
    keep = icepop_keep(b.log_rho, hp.icepop_low, hp.icepop_high)
    return w, {"icepop/mask_frac": 1.0 - masked_mean(keep, b.mask),
               "icepop/weight_mean": masked_mean(w, b.mask)}


@register("token_reject", "correction", "TIM (V4), token rejection",
          metrics=("token_reject/mask_frac",), validate=check_corrections)
def token_reject(b: PolicyBatch, hp: MethodParams):
    """Token rejection: weight 1 if rho_t lies in [icepop_low, icepop_high], else 0.

    Source: TIM (V4): a band on each token's ratio (the ``icepop`` method before it kept the
    ratio). Shapes: (B, T) -> weight (B, T).
    """
    keep = icepop_keep(b.log_rho, hp.icepop_low, hp.icepop_high)
    return keep.to(b.old_logp.dtype), {"token_reject/mask_frac": 1.0 - masked_mean(keep, b.mask)}


__all__ = ["check_corrections", "tis", "seq_tis", "mis", "seq_reject", "geo_reject", "icepop",
           "token_reject"]
