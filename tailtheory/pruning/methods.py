"""DVP's method of the GRPO engine: ``dvp``, the sampler's kept vocabulary used on both sides.

Source: DVP (P3), arXiv 2512.23087. A thin adapter from ``(PolicyBatch, MethodParams)`` to the
kept set :func:`tailtheory.core.safeset.dvp_keep`,
registered at the ``vocab`` stage with :func:`tailtheory.engine.registry.register` (the registry
imports this module when it looks the methods up), with the check of its rule and threshold
(:func:`check_dvp`). Shapes: ``B`` sequences, ``T`` response tokens, ``V`` vocabulary.
"""

from __future__ import annotations

from tailtheory.core.safeset import RULES, dvp_keep
from tailtheory.core.stats import masked_mean
from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodParams, PolicyBatch


def check_dvp(hp: MethodParams) -> None:
    """``dvp_rule`` one of :data:`~tailtheory.core.safeset.RULES` and ``dvp_rho`` in ``(0, 1)``
    (at ``rho >= 1`` a rule keeps at most the most likely token). Raises ``ValueError``."""
    if hp.dvp_rule not in RULES:
        raise ValueError(f"dvp_rule must be one of {RULES}, got {hp.dvp_rule!r}")
    if not 0.0 < hp.dvp_rho < 1.0:
        raise ValueError(f"dvp_rho must lie in (0, 1), got {hp.dvp_rho}: rule {hp.dvp_rule!r} "
                         f"at a threshold >= 1 keeps at most the most likely token, or none")


@register("dvp", "vocab", "DVP (P3)", metrics=("dvp/kept_vocab",), validate=check_dvp)
def dvp(b: PolicyBatch, hp: MethodParams):
    """Dynamic vocabulary pruning: the sampler's kept set S(rule, rho) used on both sides."""
    if b.keep is not None:                                # the sampler already pruned
        keep = b.keep
    elif b.logits is not None:
        keep = dvp_keep(b.logits, b.tokens, hp.dvp_rule, hp.dvp_rho, hp.temperature)
    else:
        raise ValueError("dvp needs the sampler's kept set or the rollout logits")
    return keep, {"dvp/kept_vocab": masked_mean(keep.float().sum(-1), b.mask)}


__all__ = ["check_dvp", "dvp"]
