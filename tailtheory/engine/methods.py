"""The registered methods: thin adapters from ``(PolicyBatch, MethodParams)`` to pure formulas.

Each function is a :class:`~tailtheory.engine.types.MethodFn`; its first docstring line is what
``tailtheory methods`` prints. Formulas live with their paper: TIM's corrections in
``tailtheory/mismatch/corrections.py``, LOPTI's in ``tailtheory/lopti/reweight.py``, DVP's kept
set in ``tailtheory/pruning/sampler.py``, TRM's mask in ``tailtheory/trm/mask.py``, the
advantages in the registry of ``tailtheory/otb/baselines.py``; the clipped surrogate is below.
Every metric key a method returns is declared at its registration.
"""

from __future__ import annotations

import torch

from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodFn, MethodParams, PolicyBatch
from tailtheory.lopti.reweight import advantage_reweight, lopti_passes
from tailtheory.mismatch.corrections import icepop_keep, mis_keep, tis_weight
from tailtheory.otb.baselines import advantage_fn, realized_energy
from tailtheory.pruning.sampler import dvp_keep
from tailtheory.trm.mask import trm_mask

LOSS_METRICS = ("loss/policy", "loss/clipfrac", "loss/ratio_mean", "loss/approx_kl",
                "loss/active_frac")
"""What every loss returns (``_policy_loss``)."""

ADV_METRICS = ("adv/abs_mean",)
"""What every advantage returns (the loss's group advantage, or ``otb``)."""


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
    log_ratio = (b.logp - b.old_logp).detach()                # log pi_new / pi_old
    metrics = {"loss/policy": float(loss.detach()),
               "loss/clipfrac": _mean(is_clipped, active),
               "loss/ratio_mean": _mean(log_ratio.exp(), active),
               "loss/approx_kl": _mean(log_ratio.exp() - 1 - log_ratio, active),  # k3 old || new
               "loss/active_frac": _mean(active, b.mask)}
    return loss, metrics


def group_advantage(name: str) -> MethodFn:
    """The :class:`MethodFn` of the group estimator ``name`` of ``tailtheory.otb.baselines``."""
    estimator = advantage_fn(name)

    def adv_fn(b: PolicyBatch, hp: MethodParams):
        adv = estimator(b.rewards, b.group_ids, b.mask).to(b.old_logp.dtype)
        return adv, {"adv/abs_mean": _mean(adv.abs(), b.mask)}
    adv_fn.__doc__ = f"Group advantage {name!r} of tailtheory.otb.baselines at every token."
    return adv_fn


@register("grpo", "loss", "GRPO; token-mean as in LOPTI's run scripts",
          metrics=LOSS_METRICS + ADV_METRICS, advantage=group_advantage("grpo"))
def grpo(b: PolicyBatch, hp: MethodParams):
    """Clipped surrogate, token-mean over all response tokens of the batch."""
    return _policy_loss(b, hp, denom=float(b.mask.sum().clamp(min=1)))


@register("dr_grpo", "loss", "Dr. GRPO (Liu et al. 2025)", metrics=LOSS_METRICS + ADV_METRICS,
          advantage=group_advantage("dr_grpo"))
def dr_grpo(b: PolicyBatch, hp: MethodParams):
    """Clipped surrogate summed over tokens, divided by the constant B * T_max (no length bias)."""
    return _policy_loss(b, hp, denom=float(b.mask.shape[0] * b.mask.shape[1]))


# ---- advantages and reweighting --------------------------------------------------------------

@register("otb", "advantage", "OTB", metrics=ADV_METRICS)
def otb(b: PolicyBatch, hp: MethodParams):
    """Optimal token baseline: A_t = (G_t - B*_t) m_t with energy-weighted B*_t."""
    if b.sum_p2 is None:
        raise ValueError("otb needs sum_p2 (sum_v pi_old(v)^2 per token) in the PolicyBatch")
    # sum_p2 is the trainer's: pair it with the trainer's log-probs (old_logp is the rollout's
    # under bypass, and pi_roll^2 may exceed the trainer's sum p^2)
    logp = b.train_logp if b.train_logp is not None else b.old_logp
    W = realized_energy(b.sum_p2, logp, b.mask)                         # (B, T)
    adv = advantage_fn("otb")(b.rewards, b.group_ids, b.mask, energy=W).to(b.old_logp.dtype)
    return adv, {"adv/abs_mean": _mean(adv.abs(), b.mask)}


@register("ar", "reweight", "LOPTI (L2)", metrics=("ar/scale_mean",))
def ar(b: PolicyBatch, hp: MethodParams):
    """Advantage Reweighting A <- (alpha * pi_old + 1 - alpha) * A, pi_old detached."""
    adv = advantage_reweight(b.adv, b.old_logp, hp.alpha)
    scale = hp.alpha * b.old_logp.detach().exp() + 1 - hp.alpha
    return adv, {"ar/scale_mean": _mean(scale, b.mask)}


# ---- mismatch corrections (token weights) ----------------------------------------------------

@register("tis", "correction", "TIM (V4), token TIS",
          metrics=("tis/weight_mean", "tis/trunc_frac"))
def tis(b: PolicyBatch, hp: MethodParams):
    """Token truncated importance sampling weight min(pi_train / pi_roll, C)."""
    w = tis_weight(b.log_rho, hp.tis_cap)
    return w, {"tis/weight_mean": _mean(w, b.mask),
               "tis/trunc_frac": _mean(b.log_rho.exp() > hp.tis_cap, b.mask)}


@register("mis", "correction", "TIM (V4), sequence masking", metrics=("mis/reject_rate",))
def mis(b: PolicyBatch, hp: MethodParams):
    """Sequence masking: drop responses whose sequence ratio leaves [mis_low, mis_high]."""
    keep = mis_keep(b.log_rho, b.mask, hp.mis_low, hp.mis_high, hp.mis_geometric)
    w = keep[:, None].to(b.old_logp.dtype).expand_as(b.old_logp)
    return w, {"mis/reject_rate": 1.0 - float(keep.float().mean())}


@register("icepop", "correction", "TIM (V4), IcePop token masking",
          metrics=("icepop/mask_frac",))
def icepop(b: PolicyBatch, hp: MethodParams):
    """Token masking: drop tokens whose pi_train / pi_roll leaves [icepop_low, icepop_high]."""
    keep = icepop_keep(b.log_rho, hp.icepop_low, hp.icepop_high)
    return keep.to(b.old_logp.dtype), {"icepop/mask_frac": 1.0 - _mean(keep, b.mask)}


@register("trm", "correction", "TRM (T12)", metrics=("trm/kept_frac",))
def trm(b: PolicyBatch, hp: MethodParams):
    """Trust region masking: drop sequences whose max / avg token divergence exceeds delta."""
    keep = trm_keep(b, hp)
    w = keep[:, None].to(b.old_logp.dtype).expand_as(b.old_logp)
    return w, {"trm/kept_frac": float(keep.float().mean())}  # trm/accept_rate is the monitor


def trm_keep(b: PolicyBatch, hp: MethodParams) -> torch.Tensor:
    """TRM's per-sequence keep mask (B,): exact token KL(pi_roll || pi_old) (``exact``), or the
    sampled-token acceptance of :func:`trm_sampled_keep` (``k2k3``; ``b.trm_accept`` when the
    trainer already computed it)."""
    if hp.trm_estimator == "exact":
        if b.tok_kl is None:
            raise ValueError("trm_estimator='exact' needs the rollout logits (PolicyBatch.tok_kl)")
        kl = b.tok_kl.double().clamp(min=0.0)           # float32 rounding can give -1e-7
        return trm_mask(b.mask, hp.trm_mode, kl=kl, delta_max=hp.trm_delta_max,
                        delta_avg=hp.trm_delta_avg)
    if b.trm_accept is not None:
        return b.trm_accept
    return trm_sampled_keep(b.mask, b.log_rho, hp)


def trm_sampled_keep(mask: torch.Tensor, log_rho: torch.Tensor,
                     hp: MethodParams) -> torch.Tensor:
    """TRM's keep from the sampled token only: k2 (max filter) and k3 (avg filter) of
    ``log_rho = log pi_train - log pi_roll``, in float64, at ``hp``'s mode and thresholds.

    Source: TRM (T12). The trainer's ``trm/accept_rate`` monitor and the ``trm`` method's
    ``k2k3`` estimator. Shapes: mask (B, T), log_rho (B, T) -> (B,) bool.
    """
    return trm_mask(mask, hp.trm_mode, log_ratio=log_rho.double(), delta_max=hp.trm_delta_max,
                    delta_avg=hp.trm_delta_avg)


# ---- vocabulary and schedule -----------------------------------------------------------------

@register("dvp", "vocab", "DVP (P3)", metrics=("dvp/kept_vocab",))
def dvp(b: PolicyBatch, hp: MethodParams):
    """Dynamic vocabulary pruning: the sampler's kept set S(rule, rho) used on both sides."""
    if b.keep is not None:                                # the sampler already pruned
        keep = b.keep
    elif b.logits is not None:
        keep = dvp_keep(b.logits, b.tokens, hp.dvp_rule, hp.dvp_rho, hp.temperature)
    else:
        raise ValueError("dvp needs the sampler's kept set or the rollout logits")
    return keep, {"dvp/kept_vocab": _mean(keep.float().sum(-1), b.mask)}


@register("lopti", "schedule", "LOPTI (L3)", metrics=("lopti/low_frac",))
def lopti(b: PolicyBatch, hp: MethodParams):
    """Two passes: tokens with pi_old < eta first, then the rest; pi_old not recomputed."""
    groups = lopti_passes(b.old_logp, b.mask, hp.eta, low_first=True)
    return groups, {"lopti/low_frac": _mean(groups[0][1], b.mask)}


@register("lopti_reversed", "schedule", "LOPTI (L3) ablation", metrics=("lopti/low_frac",))
def lopti_reversed(b: PolicyBatch, hp: MethodParams):
    """Lopti in the reversed order (high-probability tokens first), for the ablation."""
    groups = lopti_passes(b.old_logp, b.mask, hp.eta, low_first=False)
    return groups, {"lopti/low_frac": _mean(groups[1][1], b.mask)}
