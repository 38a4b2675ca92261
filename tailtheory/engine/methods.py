"""The registered methods: thin adapters from ``(PolicyBatch, MethodParams)`` to pure formulas.

Each function's first docstring line is what ``tailtheory methods`` prints. Formulas live in
``engine/masks.py`` (weights, masks, passes) and below (the clipped surrogate); advantages in
``tailtheory/otb/baselines.py``; TRM's mask in ``tailtheory/trm/mask.py``.
"""

from __future__ import annotations

import torch

from tailtheory.mismatch import corrections as masks
from tailtheory.engine.losses import MethodParams, PolicyBatch, register


def _mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x.detach().double() * mask).sum() / mask.sum().clamp(min=1))


# ---- the clipped surrogate -------------------------------------------------------------------

def clipped_surrogate(logp, old_logp, adv, eps_low: float, eps_high: float):
    """Per-token PPO/GRPO clipped objective (to minimise) and where the clip is active.

    Source: GRPO / PPO; asymmetric clip as in LOPTI's run scripts (0.20 / 0.24).
    ``l_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)``, ``r_t = exp(logp - old)``.
    Shapes: (B, T) each -> ((B, T), (B, T) bool).
    """
    ratio = torch.exp(logp - old_logp.detach())
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def _policy_loss(b: PolicyBatch, hp: MethodParams, denom: float):
    """Weighted clipped surrogate over the active tokens, divided by ``denom``."""
    active = b.mask if b.active is None else b.mask & b.active
    active = active if b.weight is None else active & (b.weight > 0)
    w = torch.ones_like(b.old_logp) if b.weight is None else b.weight
    tok_loss, is_clipped = clipped_surrogate(b.logp, b.old_logp, b.adv, hp.eps_low, hp.eps_high)
    loss = (tok_loss * w * active).sum() / denom
    log_r = (b.logp - b.old_logp).detach()
    metrics = {"loss/policy": float(loss.detach()),
               "loss/clipfrac": _mean(is_clipped, active),
               "loss/ratio_mean": _mean(log_r.exp(), active),
               "loss/approx_kl": _mean(log_r.exp() - 1 - log_r, active),  # k3 of old || new
               "loss/active_frac": _mean(active, b.mask)}
    return loss, metrics


def _group_adv(b: PolicyBatch, std: bool):
    from tailtheory.otb.baselines import grpo_advantages

    adv = grpo_advantages(b.rewards, b.group_ids, b.mask, std=std).to(b.old_logp.dtype)
    return adv, {"adv/abs_mean": _mean(adv.abs(), b.mask)}


def grpo_advantage(b: PolicyBatch, hp: MethodParams):
    """GRPO group advantage ``(R - mean_group) / std_group`` at every response token."""
    return _group_adv(b, std=True)


def dr_grpo_advantage(b: PolicyBatch, hp: MethodParams):
    """Dr. GRPO group advantage ``R - mean_group`` (no std normalisation)."""
    return _group_adv(b, std=False)


@register("grpo", "loss", "GRPO; token-mean as in LOPTI's run scripts", advantage=grpo_advantage)
def grpo(b: PolicyBatch, hp: MethodParams):
    """Clipped surrogate, token-mean over all response tokens of the batch."""
    return _policy_loss(b, hp, denom=float(b.mask.sum().clamp(min=1)))


@register("dr_grpo", "loss", "Dr. GRPO (Liu et al. 2025)", advantage=dr_grpo_advantage)
def dr_grpo(b: PolicyBatch, hp: MethodParams):
    """Clipped surrogate summed over tokens, divided by the constant B * T_max (no length bias)."""
    return _policy_loss(b, hp, denom=float(b.mask.shape[0] * b.mask.shape[1]))


# ---- advantages and reweighting --------------------------------------------------------------

@register("otb", "advantage", "OTB")
def otb(b: PolicyBatch, hp: MethodParams):
    """Optimal token baseline: A_t = (G_t - B*_t) m_t with energy-weighted B*_t."""
    from tailtheory.otb import baselines

    if b.sum_p2 is None:
        raise ValueError("otb needs sum_p2 (sum_v pi_old(v)^2 per token) in the PolicyBatch")
    # sum_p2 is the trainer's: pair it with the trainer's log-probs (old_logp is the rollout's
    # under bypass, and pi_roll^2 may exceed the trainer's sum p^2)
    logp = b.train_logp if b.train_logp is not None else b.old_logp
    W = baselines.realized_energy(b.sum_p2, logp, b.mask)               # (B, T)
    adv = baselines.optimal_token_baseline(b.rewards, W, b.mask, b.group_ids)
    adv = adv.to(b.old_logp.dtype)
    return adv, {"adv/abs_mean": _mean(adv.abs(), b.mask)}


@register("ar", "reweight", "LOPTI (L2)")
def ar(b: PolicyBatch, hp: MethodParams):
    """Advantage Reweighting A <- (alpha * pi_old + 1 - alpha) * A, pi_old detached."""
    adv = masks.advantage_reweight(b.adv, b.old_logp, hp.alpha)
    scale = hp.alpha * b.old_logp.detach().exp() + 1 - hp.alpha
    return adv, {"ar/scale_mean": _mean(scale, b.mask)}


# ---- mismatch corrections (token weights) ----------------------------------------------------

@register("tis", "correction", "TIM (V4), token TIS")
def tis(b: PolicyBatch, hp: MethodParams):
    """Token truncated importance sampling weight min(pi_train / pi_roll, C)."""
    w = masks.tis_weight(b.log_r, hp.tis_cap)
    return w, {"tis/weight_mean": _mean(w, b.mask),
               "tis/trunc_frac": _mean(b.log_r.exp() > hp.tis_cap, b.mask)}


@register("mis", "correction", "TIM (V4), sequence masking")
def mis(b: PolicyBatch, hp: MethodParams):
    """Sequence masking: drop responses whose sequence ratio leaves [mis_low, mis_high]."""
    keep = masks.mis_keep(b.log_r, b.mask, hp.mis_low, hp.mis_high, hp.mis_geometric)
    w = keep[:, None].to(b.old_logp.dtype).expand_as(b.old_logp)
    return w, {"mis/reject_rate": 1.0 - float(keep.float().mean())}


@register("icepop", "correction", "TIM (V4), IcePop token masking")
def icepop(b: PolicyBatch, hp: MethodParams):
    """Token masking: drop tokens whose pi_train / pi_roll leaves [icepop_low, icepop_high]."""
    keep = masks.icepop_keep(b.log_r, hp.icepop_low, hp.icepop_high)
    return keep.to(b.old_logp.dtype), {"icepop/mask_frac": 1.0 - _mean(keep, b.mask)}


@register("trm", "correction", "TRM (T12)")
def trm(b: PolicyBatch, hp: MethodParams):
    """Trust region masking: drop sequences whose max / avg token divergence exceeds delta."""
    keep = trm_keep(b, hp)
    w = keep[:, None].to(b.old_logp.dtype).expand_as(b.old_logp)
    return w, {"trm/kept_frac": float(keep.float().mean())}  # trm/accept_rate is the monitor


def trm_keep(b: PolicyBatch, hp: MethodParams) -> torch.Tensor:
    """TRM's per-sequence keep mask (B,): exact token KL(pi_roll || pi_old), or k2 / k3 of the
    sampled log-ratio (``tailtheory.trm.mask``)."""
    from tailtheory.trm.mask import trm_mask

    if hp.trm_estimator == "exact":
        if b.tok_kl is None:
            raise ValueError("trm_estimator='exact' needs the rollout logits (PolicyBatch.tok_kl)")
        div = {"kl": b.tok_kl.double().clamp(min=0.0)}  # float32 rounding can give -1e-7
    elif hp.trm_estimator == "k2k3":
        div = {"log_ratio": b.log_r}                     # log rho = log pi_train - log pi_roll
    else:
        raise ValueError(f"trm_estimator must be 'exact' or 'k2k3', got {hp.trm_estimator!r}")
    return trm_mask(b.mask, hp.trm_mode, delta_max=hp.trm_delta_max, delta_avg=hp.trm_delta_avg,
                    **div)


# ---- vocabulary and schedule -----------------------------------------------------------------

@register("dvp", "vocab", "DVP (P3)")
def dvp(b: PolicyBatch, hp: MethodParams):
    """Dynamic vocabulary pruning: the sampler's kept set S(rule, rho) used on both sides."""
    if b.keep is not None:                                # the sampler already pruned
        keep = b.keep
    elif b.logits is not None:
        keep = masks.dvp_keep(b.logits, b.tokens, hp.dvp_rule, hp.dvp_rho, hp.temperature)
    else:
        raise ValueError("dvp needs the sampler's kept set or the rollout logits")
    return keep, {"dvp/kept_vocab": _mean(keep.float().sum(-1), b.mask)}


@register("lopti", "schedule", "LOPTI (L3)")
def lopti(b: PolicyBatch, hp: MethodParams):
    """Two passes: tokens with pi_old < eta first, then the rest; pi_old not recomputed."""
    groups = masks.lopti_passes(b.old_logp, b.mask, hp.eta, low_first=True)
    return groups, {"lopti/low_frac": _mean(groups[0][1], b.mask)}


@register("lopti_reversed", "schedule", "LOPTI (L3) ablation")
def lopti_reversed(b: PolicyBatch, hp: MethodParams):
    """Lopti in the reversed order (high-probability tokens first), for the ablation."""
    groups = masks.lopti_passes(b.old_logp, b.mask, hp.eta, low_first=False)
    return groups, {"lopti/low_frac": _mean(groups[1][1], b.mask)}
