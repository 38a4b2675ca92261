"""OTB's method of the GRPO engine: ``otb``, the optimal token baseline as the advantage stage.

Source: OTB, arXiv 2602.07078. A thin adapter from ``(PolicyBatch, MethodParams)`` to
:func:`tailtheory.otb.baselines.optimal_token_baseline` registered at the ``advantage`` stage with :func:`tailtheory.engine.registry.register` (the
registry imports this module when it looks the methods up). It reads no hyperparameter of its
own. Shapes: ``B`` sequences, ``T`` response tokens.
"""

from __future__ import annotations

from tailtheory.core.stats import masked_mean
from tailtheory.engine.methods import ADV_METRICS
from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.otb.baselines import optimal_token_baseline, realized_energy


@register("otb", "advantage", "OTB", metrics=ADV_METRICS)
def otb(b: PolicyBatch, hp: MethodParams):
    """Optimal token baseline: A_t = (G_t - B*_t) m_t with energy-weighted B*_t."""
    if b.sum_p2 is None:
        raise ValueError("otb needs sum_p2 (sum_v pi_old(v)^2 per token) in the PolicyBatch")
    # sum_p2 is the trainer's: pair it with the trainer's log-probs (old_logp is the rollout's
    # under bypass, and pi_roll^2 may exceed the trainer's sum p^2)
    logp = b.train_logp if b.train_logp is not None else b.old_logp
    W = realized_energy(b.sum_p2, logp, b.mask)                         # (B, T)
    adv = optimal_token_baseline(b.rewards, W, b.mask, b.group_ids).to(b.old_logp.dtype)
    return adv, {"adv/abs_mean": masked_mean(adv.abs(), b.mask)}


__all__ = ["otb"]
