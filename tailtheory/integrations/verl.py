"""A verl 0.9.1 plugin: tailtheory's methods in verl's policy-loss and advantage registries.

Importing this module registers them (when verl is importable; :func:`register` imports verl
lazily, so the module itself imports without it). verl imports it from a config through its
``external_lib`` route (``actor_rollout_ref.model.external_lib``, imported by every worker that
builds the model config) or the ``VERL_USE_EXTERNAL_MODULES`` environment variable (imported with
``verl`` itself, so also on the driver, where advantages are computed)::

    # VERL_USE_EXTERNAL_MODULES=tailtheory.integrations.verl python -m verl.trainer.main_ppo \\
    actor_rollout_ref:
      model:
        external_lib: tailtheory.integrations.verl
      actor:
        policy_loss:
          loss_mode: tail_ar          # or tail_grpo, tail_dr_grpo
        loss_agg_mode: token-mean     # the engine's loss_agg names are verl's
        clip_ratio_low: 0.2           # eps_low / eps_high / dual clip c: verl's own knobs
        clip_ratio_high: 0.24
    algorithm:
      adv_estimator: tail_grpo        # or tail_dr_grpo, tail_rloo, tail_otb (see below)

Registered (``LOSSES``, ``ESTIMATORS``), each a thin adapter over the engine's registered
function (``tailtheory.engine.registry``):

- policy losses ``tail_grpo``, ``tail_dr_grpo``, ``tail_ar`` (LOPTI's Advantage Reweighting with
  ``pi_old = exp(old_log_prob)``, then ``grpo``). The engine's loss (clipped surrogate, dual clip
  at verl's ``clip_ratio_c``, aggregated per micro-batch by ``loss_agg_mode``) is rescaled to
  verl's global normalisation (``global_batch_info``: tokens, sequences, ``dp_size``), so
  micro-batches and data-parallel ranks add up as in verl's own losses. verl's
  ``rollout_is_weights`` (its rollout correction) multiply the token losses, as in its vanilla
  loss. Unlike verl's vanilla loss, ``log pi - log pi_old`` is not clamped to [-20, 20].
- advantage estimators ``tail_grpo``, ``tail_dr_grpo``, ``tail_rloo`` (outcome reward
  ``token_level_rewards.sum(-1)``, groups by ``index``) and ``tail_otb`` (rewards-to-go with the
  engine's realised energy). verl 0.9.1's ``compute_advantage`` passes ``sum_pi_squared`` and
  ``old_log_probs`` only to its built-in ``optimal_token_baseline`` names, so ``tail_otb`` raises
  a clear error when called without them; verl's built-in OTB equals the engine's
  (``handle_zero_tail=False``; tested), so use it there.

Not registered (``UNSUPPORTED``, with the reason): the TIM corrections and TRM need ``log pi_roll``,
and a verl 0.9.1 policy loss receives only verl's own correction weights (``rollout_is_weights``),
never the rollout log-probs: use verl's own rollout correction (``algorithm.rollout_correction``:
token- or sequence-level importance weights and rejection), whose weights the registered losses
apply; Lopti's two passes are two optimiser steps per batch, not a loss; DVP needs the sampler's
kept set and the actor's full logits, which a loss never sees.

Knobs verl lacks (``alpha`` for ``tail_ar``, ...): the engine's ``MethodParams``
defaults, overridden by the JSON object in the environment variable :data:`PARAMS_ENV` (read when
the methods are registered, so every worker sees it; e.g. ``TAILTHEORY_METHOD_PARAMS='{"alpha":
0.5}'``), checked by the engine's checks. Metrics: the engine's keys prefixed ``tail/``.
Sources: LOPTI (arXiv 2505.12929), OTB (arXiv 2602.07078), TIM (arXiv 2605.14220), dual-clip
PPO (arXiv 1912.09729). Shapes: ``B`` responses, ``T`` response tokens.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import fields, replace

import numpy as np
import torch

from tailtheory.engine.config import _validate_method_params
from tailtheory.engine.registry import MethodSpec, parse_methods
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.engine.advantages import dr_grpo_advantages, grpo_advantages, rloo_advantages
from tailtheory.otb.baselines import optimal_token_baseline, realized_energy

PARAMS_ENV = "TAILTHEORY_METHOD_PARAMS"
"""Environment variable holding a JSON object of ``MethodParams`` overrides."""

LOSSES = {"tail_grpo": "grpo", "tail_dr_grpo": "dr_grpo", "tail_ar": "ar"}
"""verl policy-loss name -> the engine method spec it runs."""

VERL_OWNED = ("eps_low", "eps_high", "clip_ratio_c", "loss_agg", "loss_norm_len")
"""``MethodParams`` fields taken from verl's actor config (``clip_ratio_low`` / ``clip_ratio_high``
or ``clip_ratio``, ``clip_ratio_c``, ``loss_agg_mode``, ``loss_scale_factor``), not from
:data:`PARAMS_ENV`."""

UNSUPPORTED = {
    **{m: "needs log pi_roll; a verl 0.9.1 policy loss sees only verl's rollout_is_weights (use "
          "algorithm.rollout_correction)" for m in ("tis", "seq_tis", "mis", "icepop",
                                                     "token_reject", "seq_reject", "geo_reject",
                                                     "trm")},
    "lopti": "two optimiser passes per batch are not a policy loss",
    "lopti_reversed": "two optimiser passes per batch are not a policy loss",
    "dvp": "needs the sampler's kept vocabulary and the actor's full logits",
    "upweight": "not wired to verl (the engine's reweight stage only; tail_ar takes alpha in "
                "[0, 1])",
    "top_entropy": "its threshold is over the whole step's response tokens, which one policy-loss "
                   "call (a micro-batch) does not see",
    "random_tokens": "its mask is seeded by the run's seed and step, which a verl policy loss is "
                     "not given",
}
"""Methods not registered with verl, and why."""


def method_params(overrides: dict | None = None) -> MethodParams:
    """``MethodParams`` from ``overrides`` (default: the JSON in :data:`PARAMS_ENV`), checked."""
    if overrides is None:
        text = os.environ.get(PARAMS_ENV, "").strip()
        try:
            overrides = json.loads(text) if text else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{PARAMS_ENV} must hold a JSON object: {exc}") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"{PARAMS_ENV} must hold a JSON object, got {overrides!r}")
    names = {f.name for f in fields(MethodParams)} - set(VERL_OWNED)
    unknown = set(overrides) - names
    if unknown:
        raise ValueError(f"unknown method parameters {sorted(unknown)} in {PARAMS_ENV}; valid: "
                         f"{', '.join(sorted(names))} (verl's own knobs set {VERL_OWNED})")
    hp = MethodParams(**overrides)
    _validate_method_params(hp)
    return hp


def _get(config, name: str, default=None):
    """``config.name`` for verl's ``ActorConfig`` or an omegaconf ``DictConfig`` / dict."""
    if config is None:
        return default
    value = config.get(name, default) if hasattr(config, "get") else getattr(config, name, default)
    return default if value is None else value


def _params(config, hp: MethodParams, loss_agg_mode: str) -> MethodParams:
    """``hp`` with verl's own knobs (:data:`VERL_OWNED`) from the actor ``config``."""
    eps = _get(config, "clip_ratio", 0.2)
    return replace(hp, eps_low=_get(config, "clip_ratio_low", eps),
                   eps_high=_get(config, "clip_ratio_high", eps),
                   clip_ratio_c=_get(config, "clip_ratio_c", 3.0), loss_agg=loss_agg_mode,
                   loss_norm_len=int(_get(config, "loss_scale_factor", 0)))


def _global_scale(loss, mask: torch.Tensor, agg: str, config) -> torch.Tensor:
    """The engine's micro-batch aggregate rescaled to verl's ``agg_loss`` with its
    ``global_batch_info``: local tokens / global tokens (token-mean) or local / global
    sequences (seq-mean modes), times ``dp_size``; unchanged when verl gives no global count."""
    info = _get(config, "global_batch_info", {}) or {}
    dp = info.get("dp_size") or 1
    if agg == "token-mean" and info.get("batch_num_tokens") is not None:
        return loss * mask.sum().clamp(min=1) / info["batch_num_tokens"] * dp
    if agg != "token-mean" and info.get("global_batch_size") is not None:
        return loss * mask.shape[0] / info["global_batch_size"] * dp
    if dp != 1:  # as verl's agg_loss: no local mean stands for a data-parallel one
        raise ValueError(f"dp_size {dp} needs verl's global_batch_info counts for {agg!r}")
    return loss


def make_policy_loss(spec: MethodSpec, hp: MethodParams):
    """A verl ``PolicyLossFn`` running the engine's ``spec`` (a reweight stage and a loss)."""
    agg_forced = "seq-mean-token-sum-norm" if spec.loss.name == "dr_grpo" else None

    def policy_loss(old_log_prob, log_prob, advantages, response_mask,
                    loss_agg_mode: str = "token-mean", config=None, rollout_is_weights=None):
        agg = agg_forced or loss_agg_mode
        p = _params(config, hp, agg)
        mask = response_mask.bool()
        b = PolicyBatch(logp=log_prob.masked_fill(~mask, 0.0), old_logp=old_log_prob.detach(),
                        roll_logp=old_log_prob.detach(), mask=mask, adv=advantages.detach(),
                        weight=None if rollout_is_weights is None else rollout_is_weights.detach())
        metrics = {}
        if spec.reweight is not None:
            adv, metrics = spec.reweight.fn(b, p)
            b = replace(b, adv=adv)
        loss, more = spec.loss.fn(b, p)
        metrics = {f"tail/{k}": v for k, v in {**metrics, **more}.items()}
        return _global_scale(loss, mask, agg, config), metrics
    policy_loss.__doc__ = f"verl policy loss running tailtheory's {spec.label!r} (see the module)."
    return policy_loss


def _group_estimator(estimator):
    def adv_fn(token_level_rewards, response_mask, index, config=None, **kwargs):
        r = token_level_rewards.sum(-1).double()                      # outcome reward (B,)
        adv = estimator(r, np.asarray(index), response_mask.bool()).to(token_level_rewards.dtype)
        return adv, adv
    adv_fn.__doc__ = f"verl estimator: tailtheory's {estimator.__name__} (outcome reward)."
    return adv_fn


def tail_otb(token_level_rewards, response_mask, index, old_log_probs=None, sum_pi_squared=None,
             config=None, **kwargs):
    """verl estimator: OTB with rewards-to-go and the engine's realised energy W_t.

    Source: OTB (arXiv 2602.07078). ``A_t = (G_t - B*_t) m_t`` (``optimal_token_baseline``),
    ``W_t`` from ``realized_energy(sum_pi_squared, old_log_probs, mask)``. Returns
    ``(advantages, returns)``, both (B, T).
    """
    if old_log_probs is None or sum_pi_squared is None:
        raise ValueError("tail_otb needs old_log_probs and sum_pi_squared; verl 0.9.1's "
                         "compute_advantage passes them only to adv_estimator="
                         "'optimal_token_baseline' (use it, with actor.calculate_sum_pi_squared)")
    m = response_mask.bool()
    G = (token_level_rewards * m).flip(-1).cumsum(-1).flip(-1).double()   # rewards-to-go
    W = realized_energy(sum_pi_squared.double(), old_log_probs.double().masked_fill(~m, 0.0), m)
    adv = optimal_token_baseline(G, W, m, np.asarray(index))
    return adv.to(token_level_rewards.dtype), G.to(token_level_rewards.dtype)


ESTIMATORS = {"tail_grpo": _group_estimator(grpo_advantages),
              "tail_dr_grpo": _group_estimator(dr_grpo_advantages),
              "tail_rloo": _group_estimator(rloo_advantages), "tail_otb": tail_otb}
"""verl advantage-estimator name -> function (``fn(token_level_rewards, response_mask, index,
config, **kw) -> (advantages, returns)``)."""


def register(params: dict | None = None) -> list[str]:
    """Register :data:`LOSSES` and :data:`ESTIMATORS` with verl; returns the names registered.

    ``params`` overrides ``MethodParams`` (default: :data:`PARAMS_ENV`). Calling it again
    re-registers the losses with the new parameters; the estimators have none.
    """
    from verl.trainer.ppo import core_algos

    hp = method_params(params)
    for name, method in LOSSES.items():
        core_algos.register_policy_loss(name)(make_policy_loss(parse_methods(method), hp))
    for name, fn in ESTIMATORS.items():
        core_algos.register_adv_est(name)(fn)
    return [*LOSSES, *ESTIMATORS]


if importlib.util.find_spec("verl") is not None:
    register()


__all__ = ["register", "method_params", "make_policy_loss", "tail_otb", "LOSSES", "ESTIMATORS",
           "UNSUPPORTED", "PARAMS_ENV", "VERL_OWNED"]
