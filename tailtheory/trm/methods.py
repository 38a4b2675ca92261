"""TRM's method of the GRPO engine: ``trm``, trust region masking as a correction.

Source: TRM (T12), arXiv 2512.23075. A thin adapter from ``(PolicyBatch, MethodParams)`` to the
sequence filter :func:`tailtheory.trm.mask.trm_mask` (``tailtheory.core.estimators``), registered
at the ``correction`` stage with :func:`tailtheory.engine.registry.register` (the registry
imports this module when it looks the methods up), with the check of its hyperparameters
(:func:`check_trm`). The trainer logs the sampled-token acceptance of every run as its
``trm/accept_rate`` monitor (``tailtheory.engine.methods.trm_sampled_keep``); the method reuses
it under the ``k2k3`` estimator and reports its own ``trm/kept_frac``.
Shapes: ``B`` sequences, ``T`` response tokens.
"""

from __future__ import annotations

import math

import torch

from tailtheory.engine.methods import trm_sampled_keep
from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.core.estimators import CRITERIA
from tailtheory.trm.mask import trm_mask

ESTIMATORS = ("exact", "k2k3")
"""How ``trm`` measures a token's divergence: the exact token KL from the rollout logits, or
``k2`` / ``k3`` of the sampled token's log-ratio."""


def check_trm(hp: MethodParams) -> None:
    """``trm_mode`` one of :data:`CRITERIA`, ``trm_estimator`` one of :data:`ESTIMATORS`, both
    thresholds finite and > 0. Raises ``ValueError``."""
    if hp.trm_mode not in CRITERIA:
        raise ValueError(f"trm_mode must be one of {CRITERIA}, got {hp.trm_mode!r}")
    if hp.trm_estimator not in ESTIMATORS:
        raise ValueError(f"trm_estimator must be 'exact' or 'k2k3', got {hp.trm_estimator!r}")
    for name in ("trm_delta_max", "trm_delta_avg"):
        x = getattr(hp, name)
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(f"{name} must be a finite number > 0, got {x}")


@register("trm", "correction", "TRM (T12)", metrics=("trm/kept_frac",), validate=check_trm)
def trm(b: PolicyBatch, hp: MethodParams):
    """Trust region masking: drop sequences whose max / avg token divergence exceeds delta."""
    keep = trm_keep(b, hp)
    w = keep[:, None].to(b.old_logp.dtype).expand_as(b.old_logp)
    return w, {"trm/kept_frac": float(keep.float().mean())}  # trm/accept_rate is the monitor


def trm_keep(b: PolicyBatch, hp: MethodParams) -> torch.Tensor:
    """TRM's per-sequence keep mask (B,): exact token KL(pi_roll || pi_old) (``exact``), or the
    sampled-token acceptance of :func:`~tailtheory.engine.methods.trm_sampled_keep` (``k2k3``;
    ``b.trm_accept`` when the trainer already computed it)."""
    if hp.trm_estimator == "exact":
        if b.tok_kl is None:
            raise ValueError("trm_estimator='exact' needs the rollout logits (PolicyBatch.tok_kl)")
        kl = b.tok_kl.double().clamp(min=0.0)           # float32 rounding can give -1e-7
        return trm_mask(b.mask, hp.trm_mode, kl=kl, delta_max=hp.trm_delta_max,
                        delta_avg=hp.trm_delta_avg)
    if b.trm_accept is not None:
        return b.trm_accept
    return trm_sampled_keep(b.mask, b.log_rho, hp)


__all__ = ["ESTIMATORS", "check_trm", "trm", "trm_keep"]
