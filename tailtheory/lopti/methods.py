"""LOPTI's methods of the GRPO engine: Advantage Reweighting (``ar``) and the two-pass schedule
(``lopti``, and ``lopti_reversed`` for the ablation).

Source: LOPTI (L2, L3). Thin adapters from ``(PolicyBatch, MethodParams)`` to the formulas of
:mod:`tailtheory.lopti.reweight`, registered with :func:`tailtheory.engine.registry.register`
(the registry imports this module when it looks the methods up), each with the check of the
hyperparameter it reads: ``alpha`` in ``[0, 1]``, ``eta`` in ``(0, 1)``.
Shapes: ``B`` sequences, ``T`` response tokens.
"""

from __future__ import annotations

from tailtheory.core.stats import masked_mean
from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.lopti.reweight import advantage_reweight, lopti_passes


def check_alpha(hp: MethodParams) -> None:
    """``ar``'s ``alpha`` lies in ``[0, 1]`` (0: plain GRPO); raises ``ValueError``."""
    if not 0.0 <= hp.alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {hp.alpha}")


def check_eta(hp: MethodParams) -> None:
    """Lopti's split ``eta`` lies in ``(0, 1)`` (else one pass is empty); raises ``ValueError``."""
    if not 0.0 < hp.eta < 1.0:
        raise ValueError(f"eta must lie in (0, 1), got {hp.eta}")


@register("ar", "reweight", "LOPTI (L2)", metrics=("ar/scale_mean",), validate=check_alpha)
def ar(b: PolicyBatch, hp: MethodParams):
    """Advantage Reweighting A <- (alpha * pi_old + 1 - alpha) * A, pi_old detached."""
    adv = advantage_reweight(b.adv, b.old_logp, hp.alpha)
    scale = hp.alpha * b.old_logp.detach().exp() + 1 - hp.alpha
    return adv, {"ar/scale_mean": masked_mean(scale, b.mask)}


@register("lopti", "schedule", "LOPTI (L3)", metrics=("lopti/low_frac",), validate=check_eta)
def lopti(b: PolicyBatch, hp: MethodParams):
    """Two passes: tokens with pi_old < eta first, then the rest; pi_old not recomputed."""
    groups = lopti_passes(b.old_logp, b.mask, hp.eta, low_first=True)
    return groups, {"lopti/low_frac": masked_mean(groups[0][1], b.mask)}


@register("lopti_reversed", "schedule", "LOPTI (L3) ablation", metrics=("lopti/low_frac",),
          validate=check_eta)
def lopti_reversed(b: PolicyBatch, hp: MethodParams):
    """Lopti in the reversed order (high-probability tokens first), for the ablation."""
    groups = lopti_passes(b.old_logp, b.mask, hp.eta, low_first=False)
    return groups, {"lopti/low_frac": masked_mean(groups[1][1], b.mask)}


__all__ = ["check_alpha", "check_eta", "ar", "lopti", "lopti_reversed"]
