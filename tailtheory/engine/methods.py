"""The engine's own registered methods: the clipped surrogate, its aggregations and the GRPO losses.

Each function is a :class:`~tailtheory.engine.types.MethodFn`; its first docstring line is what
``tailtheory methods`` prints. Here: the clipped surrogate (with the optional dual clip), the
loss aggregations (``LOSS_AGGS``), the ``grpo`` and ``dr_grpo`` losses with their group
advantages (``tailtheory/engine/advantages.py``) and the check of the loss hyperparameters, and
TRM's sampled-token acceptance that the trainer logs as a monitor
(:func:`trm_sampled_keep`, from the filter of ``tailtheory/core/estimators.py``).

The papers' methods are registered by their sections, next to their formulas:
``tailtheory/lopti/methods.py`` (ar, lopti, lopti_reversed; upweight, top_entropy,
random_tokens), ``tailtheory/tim/methods.py`` (the
mismatch corrections), ``tailtheory/trm/methods.py`` (trm), ``tailtheory/pruning/methods.py``
(dvp), ``tailtheory/otb/methods.py`` (otb); :mod:`tailtheory.engine.registry` imports them.
Every metric key a method returns is declared at its registration.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.estimators import trust_region_keep
from tailtheory.core.stats import masked_mean
from tailtheory.engine.advantages import dr_grpo_advantages, grpo_advantages
from tailtheory.engine.registry import register
from tailtheory.engine.types import MethodFn, MethodParams, PolicyBatch

LOSS_METRICS = ("loss/policy", "loss/clipfrac", "loss/ratio_mean", "loss/approx_kl",
                "loss/active_frac")
"""What every loss returns (``_policy_loss``)."""

ADV_METRICS = ("adv/abs_mean",)
"""What every advantage returns (the loss's group advantage, or ``otb``)."""


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
      ``L = max_completion_length``; verl 0.9.1's mode divides by ``B L`` too).

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
               "loss/clipfrac": masked_mean(is_clipped, active),
               "loss/ratio_mean": masked_mean(log_ratio.exp(), active),
               # k3 of old || new
               "loss/approx_kl": masked_mean(log_ratio.exp() - 1 - log_ratio, active),
               "loss/active_frac": masked_mean(active, b.mask)}
    return loss, metrics


def group_advantage(estimator) -> MethodFn:
    """The :class:`MethodFn` of a group estimator of ``tailtheory.engine.advantages``
    (``fn(rewards, group_ids, mask) -> (B, T)``)."""
    def adv_fn(b: PolicyBatch, hp: MethodParams):
        adv = estimator(b.rewards, b.group_ids, b.mask).to(b.old_logp.dtype)
        return adv, {"adv/abs_mean": masked_mean(adv.abs(), b.mask)}
    adv_fn.__doc__ = f"{estimator.__name__} of tailtheory.engine.advantages at every token."
    return adv_fn


def check_loss_params(hp: MethodParams) -> None:
    """The losses' hyperparameters: the clip range ``0 < eps_low < 1``, ``eps_high > 0``; the
    aggregation's name and constant; the dual clip's ``c > 1`` (or None: off). Raises
    ``ValueError``."""
    if not (hp.eps_low > 0 and hp.eps_high > 0 and hp.eps_low < 1):
        raise ValueError(f"need 0 < eps_low < 1 and eps_high > 0, got {hp.eps_low}, "
                         f"{hp.eps_high}")
    if hp.loss_agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss_agg {hp.loss_agg!r}; valid: {', '.join(LOSS_AGGS)}")
    check_positive_int(hp.loss_norm_len, "loss_norm_len", minimum=0)
    c = hp.clip_ratio_c
    if c is not None and not (c > 1 and math.isfinite(c)):
        raise ValueError(f"clip_ratio_c must be a finite number > 1 (or none: off), got {c}")


@register("grpo", "loss", "GRPO; loss_agg token-mean as in LOPTI's run scripts",
          metrics=LOSS_METRICS + ADV_METRICS, advantage=group_advantage(grpo_advantages),
          validate=check_loss_params)
def grpo(b: PolicyBatch, hp: MethodParams):
    """Clipped surrogate (dual clip if clip_ratio_c), aggregated by loss_agg (token-mean).

    Source: GRPO; ``l_t`` of :func:`clipped_surrogate` times the correction weight on the active
    tokens, then :func:`aggregate_loss`. Shapes: (B, T) -> scalar.
    """
    return _policy_loss(b, hp, hp.loss_agg)


@register("dr_grpo", "loss", "Dr. GRPO (Liu et al. 2025)", metrics=LOSS_METRICS + ADV_METRICS,
          advantage=group_advantage(dr_grpo_advantages), validate=check_loss_params)
def dr_grpo(b: PolicyBatch, hp: MethodParams):
    """Unnormalised group advantage, clipped surrogate summed over tokens / (B * L): no length bias.

    Shorthand for the ``dr_grpo`` advantage with ``loss_agg = seq-mean-token-sum-norm`` (``L =
    loss_norm_len``, or the padded length T when 0); ``loss_agg`` itself is not read.
    Source: Dr. GRPO (arXiv 2503.20783); TRL's ``dr_grpo``. Shapes: (B, T) -> scalar.
    """
    return _policy_loss(b, hp, "seq-mean-token-sum-norm")


# ---- TRM's acceptance, the trainer's monitor -------------------------------------------------

def trm_sampled_keep(mask: torch.Tensor, log_rho: torch.Tensor,
                     hp: MethodParams) -> torch.Tensor:
    """TRM's keep from the sampled token only: k2 (max filter) and k3 (avg filter) of
    ``log_rho = log pi_train - log pi_roll``, in float64, at ``hp``'s mode and thresholds.

    Source: TRM (T12), the filter of :func:`tailtheory.core.estimators.trust_region_keep`
    (``tailtheory.trm.mask.trm_mask``). The trainer's ``trm/accept_rate`` monitor (every run,
    whatever its method) and the ``trm`` method's ``k2k3`` estimator.
    Shapes: mask (B, T), log_rho (B, T) -> (B,) bool.
    """
    return trust_region_keep(mask, hp.trm_mode, log_ratio=log_rho.double(),
                             delta_max=hp.trm_delta_max, delta_avg=hp.trm_delta_avg)
