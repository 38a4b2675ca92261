"""LOPTI's methods of the GRPO engine: Advantage Reweighting (``ar``) and the two-pass schedule
(``lopti``, and ``lopti_reversed`` for the ablation); and the field's opposite claims:
``upweight`` (arXiv 2603.22117), ``top_entropy`` (arXiv 2506.01939) and ``random_tokens`` (the
control of arXiv 2605.07660).

Source: LOPTI (L2, L3) and L7-L9. Thin adapters from ``(PolicyBatch, MethodParams)`` to the
formulas of :mod:`tailtheory.lopti.reweight` and :mod:`tailtheory.lopti.opposite`, registered
with :func:`tailtheory.engine.registry.register` (the registry imports this module when it looks
the methods up), each with the check of the hyperparameter it reads: ``alpha`` in ``[0, 1]``,
``eta`` in ``(0, 1)``, ``upweight_c >= 0``, ``token_fraction`` in ``(0, 1]``.
``top_entropy`` and ``random_tokens`` are token weights (the correction stage): 1 on the kept
tokens, 0 elsewhere, the loss still normalised by every response token
(:mod:`tailtheory.lopti.opposite`).
Shapes: ``B`` sequences, ``T`` response tokens.
"""

from __future__ import annotations

from tailtheory.core.stats import masked_mean
from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.lopti.opposite import (check_c, check_fraction, random_token_mask,
                                       top_entropy_mask, upweight_advantage)
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


def check_upweight_c(hp: MethodParams) -> None:
    """``upweight``'s ``upweight_c`` is a finite number ``>= 0`` (0: plain GRPO); raises
    ``ValueError``."""
    check_c(hp.upweight_c)


def check_token_fraction(hp: MethodParams) -> None:
    """``top_entropy``'s and ``random_tokens``'s ``token_fraction`` lies in ``(0, 1]``; raises
    ``ValueError``."""
    check_fraction(hp.token_fraction)


@register("upweight", "reweight", "after arXiv 2603.22117, on GRPO (L7)",
          metrics=("upweight/scale_mean",), validate=check_upweight_c)
def upweight(b: PolicyBatch, hp: MethodParams):
    """Upweighting A <- (1 + c - c * pi_old) * A, pi_old detached (c = upweight_c, 0.2)."""
    adv = upweight_advantage(b.adv, b.old_logp, hp.upweight_c)
    scale = 1 + hp.upweight_c - hp.upweight_c * b.old_logp.detach().exp()
    return adv, {"upweight/scale_mean": masked_mean(scale, b.mask)}


@register("top_entropy", "correction", "arXiv 2506.01939 (L8)",
          metrics=("top_entropy/kept_frac", "top_entropy/threshold"),
          validate=check_token_fraction)
def top_entropy(b: PolicyBatch, hp: MethodParams):
    """Weight 1 on the step's top token_fraction (0.2) of tokens by pi_old's entropy, else 0."""
    if b.entropy is None:
        raise ValueError("top_entropy needs the pi_old forward's per-token entropy (the "
                         "trainer sets it); this batch has none")
    keep, threshold = top_entropy_mask(b.entropy, b.mask, hp.token_fraction)
    return keep.to(b.old_logp.dtype), {"top_entropy/kept_frac": masked_mean(keep, b.mask),
                                       "top_entropy/threshold": threshold}


@register("random_tokens", "correction", "control of arXiv 2605.07660 (L9)",
          metrics=("random_tokens/kept_frac",), validate=check_token_fraction)
def random_tokens(b: PolicyBatch, hp: MethodParams):
    """Weight 1 on a random token_fraction (0.2) of the step's tokens (seeded by run and step)."""
    keep = random_token_mask(b.mask, hp.token_fraction, b.seed, b.step)
    return keep.to(b.old_logp.dtype), {"random_tokens/kept_frac": masked_mean(keep, b.mask)}


__all__ = ["check_alpha", "check_eta", "check_upweight_c", "check_token_fraction", "ar", "lopti",
           "lopti_reversed", "upweight", "top_entropy", "random_tokens"]
