"""A GRPO step's plan between its ``pi_old`` forward and its updates, and the first pass that
needs no ``pi_old`` value.

Source: GRPO (``engine/trainer.py`` runs the step). :func:`plan_step` turns the step's
:class:`~tailtheory.engine.types.PolicyBatch` into advantages, correction weights, the update
passes and the loss mask; :func:`pass_loss` is one pass's loss. The trainer calls both.

**The first pass of a micro-batch update.** With ``update_memory="micro-batch"`` no graph is
kept across micro-batches, so a step's update needs ``d loss / d logp`` (B, T) before it can
run each micro-batch's forward and backward. In general that gradient reads ``pi_old``'s
log-probs (AR's weights, Lopti's passes, OTB's baseline, the corrections' ratios), so a no-grad
``pi_old`` forward comes first and the update's forward runs again: ``8 N`` FLOPs a token where
a kept graph costs ``6 N``. Where the gradient reads no ``pi_old`` value
(:func:`first_pass_known`: GRPO's and Dr. GRPO's loss on group advantages, ``pi_old``
recomputed, no reweighting, correction, vocabulary stage or schedule), it is known before the
forward: at the first pass the log-probs are ``pi_old``'s, so the ratio is exactly 1 and the
gradient is the one the loss gives at ``logp = old_logp = 0`` (:func:`first_pass_gradient`).
The ``pi_old`` forward then carries it back micro-batch by micro-batch
(:func:`~tailtheory.engine.forward_stats.forward_stats` with ``grad_logp``): one forward serves
the statistics and the update, ``6 N`` a token.

Shapes: ``B`` responses of ``T`` tokens; per-token ``(B, T)``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from tailtheory.engine.forward_stats import check_finite
from tailtheory.engine.registry import advantages, correction_weight, passes
from tailtheory.engine.step_metrics import zero_variance_groups
from tailtheory.engine.types import PolicyBatch

VALUE_FREE_LOSSES = ("grpo", "dr_grpo")
"""Losses whose gradient at the first pass reads no log-prob value: the clipped surrogate at
ratio 1 (its clip, dual clip included, inactive there) on the loss's own group advantage."""


def reward_tensor(rewards: list, device) -> torch.Tensor:
    """``(B,)`` float64: the total of each response's
    :class:`~tailtheory.engine.tasks.task.Reward`."""
    return torch.tensor([r.total for r in rewards], dtype=torch.float64, device=device)


def plan_step(b: PolicyBatch, cfg) -> tuple[PolicyBatch, list, torch.Tensor, torch.Tensor, dict]:
    """``(b with advantages and weights, passes, flat groups (n_groups,), loss mask (B, T),
    metrics)`` of a step: advantages (group or OTB, then AR), the product of the corrections'
    weights, the passes (one, or the schedule's), the groups whose rewards are all equal and,
    with ``cfg.filter_zero_var``, the loss mask without them (DAPO, arXiv 2503.14476, drops such
    groups out of the loss's denominators too)."""
    spec = cfg.spec
    adv, m_adv = advantages(spec, b, cfg)
    weight, m_cor = correction_weight(spec, replace(b, adv=adv), cfg)
    b = replace(b, adv=adv.to(b.old_logp.dtype), weight=weight)
    groups, m_sched = passes(spec, b, cfg)
    flat = zero_variance_groups(b.rewards, b.group_ids)                      # (n_groups,)
    loss_mask = b.mask
    if cfg.filter_zero_var:
        loss_mask = b.mask & ~flat[b.group_ids][:, None]
    return b, groups, flat, loss_mask, {**m_adv, **m_cor, **m_sched}


def pass_loss(b: PolicyBatch, cfg, step: int, logp: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """One pass's loss (the spec's loss on ``b`` with log-probs ``logp`` (B, T), 0 off the
    mask) and its metrics; a non-finite loss stops the run."""
    loss, metrics = cfg.spec.loss.fn(replace(b, logp=logp.masked_fill(~b.mask, 0.0)), cfg)
    check_finite(loss.detach(), "loss", step)
    return loss, metrics


def first_pass_known(cfg) -> bool:
    """Whether the first update pass's ``d loss / d logp`` is known before the ``pi_old``
    forward (the module docstring): a micro-batch update (``update_memory="micro-batch"``),
    ``pi_old`` recomputed, a loss of :data:`VALUE_FREE_LOSSES` on its own group advantage, and
    no reweighting, correction, vocabulary stage or schedule."""
    s = cfg.spec
    return (cfg.update_memory == "micro-batch" and cfg.pi_old == "recompute"
            and s.loss.name in VALUE_FREE_LOSSES and s.advantage is None and s.reweight is None
            and not s.corrections and s.vocab is None and s.schedule is None)


def first_pass_gradient(mask: torch.Tensor, rewards: torch.Tensor, group_ids: torch.Tensor,
                        cfg, step: int) -> tuple[torch.Tensor, dict]:
    """``(d loss / d logp (B, T), the pass's loss metrics)`` of the first update pass, before any
    forward; only where :func:`first_pass_known` (else ``ValueError``). The step's plan and loss
    on a batch whose log-probs are all 0: the ratio is exactly 1, as at ``pi_old``, so the
    gradient and the metrics are those of the step's own log-probs. Shapes: mask (B, T),
    rewards and group_ids (B,)."""
    if not first_pass_known(cfg):
        raise ValueError(f"the first pass of {cfg.spec.label!r} (pi_old {cfg.pi_old!r}, update "
                         f"memory {cfg.update_memory!r}) reads pi_old's log-probs")
    z = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    b = PolicyBatch(logp=z, old_logp=z, roll_logp=z, mask=mask, rewards=rewards,
                    group_ids=group_ids, train_logp=z)
    b, groups, _, loss_mask, _ = plan_step(b, cfg)
    logp = z.clone().requires_grad_()
    loss, metrics = pass_loss(replace(b, active=groups[0][1], mask=loss_mask), cfg, step, logp)
    loss.backward()
    return logp.grad, metrics
