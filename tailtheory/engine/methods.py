"""The registered methods: thin adapters from ``(PolicyBatch, MethodParams)`` to pure formulas.

Each function is a :class:`~tailtheory.engine.types.MethodFn`; its first docstring line is what
``tailtheory methods`` prints. Formulas live with their paper: TIM's corrections in
``tailtheory/tim/corrections.py``, LOPTI's in ``tailtheory/lopti/reweight.py``, DVP's kept
set in ``tailtheory/pruning/sampler.py``, TRM's mask in ``tailtheory/trm/mask.py``, the
advantages in the registry of ``tailtheory/otb/baselines.py``; the clipped surrogate (with the
optional dual clip) and the loss aggregations (``LOSS_AGGS``) are below.
Every metric key a method returns is declared at its registration.
"""

from __future__ import annotations

import torch

from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodFn, MethodParams, PolicyBatch
from tailtheory.lopti.reweight import advantage_reweight, lopti_passes
from tailtheory.tim.corrections import (geo_keep, icepop_keep, icepop_weight, mis_keep,
                                             mis_weight, seq_tis_weight, tis_weight)
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


# ---- the clipped surrogate and the loss aggregation -------------------------------------------

def clipped_surrogate(logp, old_logp, adv, eps_low: float, eps_high: float,
                      clip_ratio_c: float | None = None):
    """Per-token PPO/GRPO clipped objective (to minimise) and where the clip is active.

    Source: GRPO / PPO; asymmetric clip as in LOPTI's run scripts (0.20 / 0.24).
    ``l_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)``, ``r_t = exp(logp - old)``.
    Dual clip (``clip_ratio_c = c``, dual-clip PPO arXiv 1912.09729, verl's
    ``compute_policy_loss_vanilla``): where ``A_t < 0``, ``l_t <- min(l_t, -c A_t)`` (bounds the
    loss, and zeroes the gradient, of a token whose ratio ran past ``c``); ``None``: off.
    Shapes: (B, T) each -> ((B, T), (B, T) bool).
    """
    ratio = torch.exp(logp - old_logp.detach())
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    if clip_ratio_c is not None:
        if not clip_ratio_c > 1:
            raise ValueError(f"clip_ratio_c must be > 1 (or None: off), got {clip_ratio_c}")
        loss = torch.where(adv < 0, torch.minimum(loss, -clip_ratio_c * adv), loss)
    return loss, clipped < unclipped


LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
"""The loss aggregations (verl's ``loss_agg_mode`` names) of :func:`aggregate_loss`."""


def aggregate_loss(tok_loss: torch.Tensor, mask: torch.Tensor, agg: str,
                   norm_len: int = 0) -> torch.Tensor:
    """The scalar loss from per-token losses: ``agg`` over the response tokens ``mask``.

    Source: GRPO, DAPO, Dr. GRPO; names as verl's ``agg_loss``. With ``x = tok_loss`` on the
    response tokens (0 elsewhere), ``B`` sequences, ``n_i`` response tokens of sequence ``i``:

    - ``token-mean``: ``sum_{i,t} x_it / sum_i n_i`` (DAPO; TRL's dapo / bnpo);
    - ``seq-mean-token-mean``: ``(1/B) sum_i (sum_t x_it / n_i)`` (GRPO; TRL's grpo);
    - ``seq-mean-token-sum-norm``: ``sum_{i,t} x_it / (B L)`` with ``L = norm_len``, or the padded
      length ``T`` when ``norm_len = 0`` (Dr. GRPO; TRL's dr_grpo with
      ``L = max_completion_length``; verl's mode divides by ``L`` alone, not by ``B``).

    Denominators count every response token and every sequence, so a token or sequence a
    correction weighs 0 (rejected) still counts, as in TRM's definition and TRL's losses; verl
    drops rejected tokens from its ``response_mask`` and so divides by the kept ones.
    Shapes: tok_loss (B, T), mask (B, T) bool -> scalar.
    """
    if agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss_agg {agg!r}; valid: {', '.join(LOSS_AGGS)}")
    if norm_len < 0:
        raise ValueError(f"loss_norm_len must be >= 0 (0: the padded length), got {norm_len}")
    x = tok_loss.masked_fill(~mask, 0.0)
    if agg == "token-mean":
        return x.sum() / float(mask.sum().clamp(min=1))
    if agg == "seq-mean-token-mean":
        return (x.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    return x.sum() / float(mask.shape[0] * (norm_len or mask.shape[1]))


def _policy_loss(b: PolicyBatch, hp: MethodParams, agg: str):
    """Weighted clipped surrogate over the active tokens, aggregated by ``agg`` over every
    response token (inactive and weight-0 tokens count in the denominators)."""
    active = b.mask if b.active is None else b.mask & b.active
    active = active if b.weight is None else active & (b.weight > 0)
    w = torch.ones_like(b.old_logp) if b.weight is None else b.weight
    tok_loss, is_clipped = clipped_surrogate(b.logp, b.old_logp, b.adv, hp.eps_low, hp.eps_high,
                                             hp.clip_ratio_c)
    loss = aggregate_loss(tok_loss * w * active, b.mask, agg, hp.loss_norm_len)
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


@register("grpo", "loss", "GRPO; loss_agg token-mean as in LOPTI's run scripts",
          metrics=LOSS_METRICS + ADV_METRICS, advantage=group_advantage("grpo"))
def grpo(b: PolicyBatch, hp: MethodParams):
    """Clipped surrogate (dual clip if clip_ratio_c), aggregated by loss_agg (token-mean).

    Source: GRPO; ``l_t`` of :func:`clipped_surrogate` times the correction weight on the active
    tokens, then :func:`aggregate_loss`. Shapes: (B, T) -> scalar.
    """
    return _policy_loss(b, hp, hp.loss_agg)


@register("dr_grpo", "loss", "Dr. GRPO (Liu et al. 2025)", metrics=LOSS_METRICS + ADV_METRICS,
          advantage=group_advantage("dr_grpo"))
def dr_grpo(b: PolicyBatch, hp: MethodParams):
    """Unnormalised group advantage, clipped surrogate summed over tokens / (B * L): no length bias.

    Shorthand for the ``dr_grpo`` advantage with ``loss_agg = seq-mean-token-sum-norm`` (``L =
    loss_norm_len``, or the padded length T when 0); ``loss_agg`` itself is not read.
    Source: Dr. GRPO (arXiv 2503.20783); TRL's ``dr_grpo``. Shapes: (B, T) -> scalar.
    """
    return _policy_loss(b, hp, "seq-mean-token-sum-norm")


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
# rho_t = pi_train / pi_roll = exp(b.log_rho). Every weight is detached (a constant factor on the
# surrogate, as in verl and TRL); sequence weights are broadcast to the sequence's tokens.

def _per_token(seq_w: torch.Tensor, b: PolicyBatch) -> torch.Tensor:
    """A per-sequence weight (B,) on every token of its sequence. Shapes: (B,) -> (B, T)."""
    return seq_w[:, None].to(b.old_logp.dtype).expand_as(b.old_logp)


@register("tis", "correction", "TIM (V4), token TIS",
          metrics=("tis/weight_mean", "tis/trunc_frac"))
def tis(b: PolicyBatch, hp: MethodParams):
    """Token truncated importance sampling: weight min(rho_t, tis_cap), detached.

    Source: TIM (V4); verl's ``rollout_is="token"``, TRL's ``token_truncate``.
    Shapes: (B, T) -> weight (B, T).
    """
    w = tis_weight(b.log_rho, hp.tis_cap)
    return w, {"tis/weight_mean": _mean(w, b.mask),
               "tis/trunc_frac": _mean(b.log_rho.exp() > hp.tis_cap, b.mask)}


@register("seq_tis", "correction", "TIM (V4), sequence TIS",
          metrics=("seq_tis/weight_mean", "seq_tis/trunc_frac"))
def seq_tis(b: PolicyBatch, hp: MethodParams):
    """Sequence truncated importance sampling: weight min(prod_t rho_t, seq_tis_cap), detached.

    Source: TIM (V4); verl's ``rollout_is="sequence"``, TRL's ``sequence_truncate``. Metrics
    over sequences: the mean weight, the fraction truncated at the cap.
    Shapes: (B, T) -> weight (B, T), one value per sequence.
    """
    w = seq_tis_weight(b.log_rho, b.mask, hp.seq_tis_cap)                # (B,)
    return _per_token(w, b), {"seq_tis/weight_mean": float(w.double().mean()),
                              "seq_tis/trunc_frac": float((w >= hp.seq_tis_cap).double().mean())}


@register("mis", "correction", "TIM (V4), masked IS",
          metrics=("mis/reject_rate", "mis/weight_mean"))
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
          metrics=("seq_reject/reject_rate",))
def seq_reject(b: PolicyBatch, hp: MethodParams):
    """Sequence rejection: weight 1 if prod_t rho_t lies in [mis_low, mis_high], else 0.

    Source: TIM (V4); verl's ``rollout_rs="sequence"`` (which also drops the sequence from its
    denominators; here it still counts). Shapes: (B, T) -> weight (B, T), one value per sequence.
    """
    keep = mis_keep(b.log_rho, b.mask, hp.mis_low, hp.mis_high)          # (B,) bool
    return _per_token(keep, b), {"seq_reject/reject_rate": 1.0 - float(keep.double().mean())}


@register("geo_reject", "correction", "TIM (V4), geometric rejection",
          metrics=("geo_reject/reject_rate",))
def geo_reject(b: PolicyBatch, hp: MethodParams):
    """Geometric rejection: weight 1 if exp(mean_t log rho_t) is in [geo_low, geo_high], else 0.

    Source: TIM (V4); verl's ``rollout_rs="geometric"`` (a length-normalised sequence band).
    Shapes: (B, T) -> weight (B, T), one value per sequence.
    """
    keep = geo_keep(b.log_rho, b.mask, hp.geo_low, hp.geo_high)          # (B,) bool
    return _per_token(keep, b), {"geo_reject/reject_rate": 1.0 - float(keep.double().mean())}


@register("icepop", "correction", "TIM (V4), IcePop",
          metrics=("icepop/mask_frac", "icepop/weight_mean"))
def icepop(b: PolicyBatch, hp: MethodParams):
    """IcePop: weight rho_t inside [icepop_low, icepop_high], 0 outside (the ratio is kept).

    Source: TIM (V4), IcePop; TRL's ``token_mask``. Detached. Metrics over response tokens: the
    masked fraction, the mean weight. Shapes: (B, T) -> weight (B, T).
    """
    w = icepop_weight(b.log_rho, hp.icepop_low, hp.icepop_high).to(b.old_logp.dtype)
    keep = icepop_keep(b.log_rho, hp.icepop_low, hp.icepop_high)
    return w, {"icepop/mask_frac": 1.0 - _mean(keep, b.mask),
               "icepop/weight_mean": _mean(w, b.mask)}


@register("token_reject", "correction", "TIM (V4), token rejection",
          metrics=("token_reject/mask_frac",))
def token_reject(b: PolicyBatch, hp: MethodParams):
    """Token rejection: weight 1 if rho_t lies in [icepop_low, icepop_high], else 0.

    Source: TIM (V4); verl's ``rollout_rs="token"`` (the ``icepop`` method before it kept the
    ratio). Shapes: (B, T) -> weight (B, T).
    """
    keep = icepop_keep(b.log_rho, hp.icepop_low, hp.icepop_high)
    return keep.to(b.old_logp.dtype), {"token_reject/mask_frac": 1.0 - _mean(keep, b.mask)}


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
