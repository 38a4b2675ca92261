"""The data a method reads and the one signature every method has.

- :class:`PolicyBatch`: the per-step record (rollout fields, per-token statistics, log-ratios),
  built once by the trainer and passed down unchanged except for what a stage adds.
- :class:`MethodParams`: the method hyperparameters (``TrainConfig`` extends it and is validated
  once, when it is built).
- :class:`MethodFn`: ``fn(b, hp) -> (value, metrics)``, the signature of every registered method.

Two log-ratios, two names: ``log_rho = log pi_train - log pi_roll`` (the training-inference
mismatch, TIM V4, TRM T12) and ``log_ratio = log pi_new - log pi_old`` (the PPO ratio of an
update). Shapes: ``B`` sequences, ``T`` response tokens, ``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import torch

Metrics = dict[str, float]
"""Namespaced scalar metrics, ``"stage/name" -> value`` (e.g. ``loss/clipfrac``)."""


@dataclass(frozen=True)
class PolicyBatch:
    """Everything a method may read. Per-token tensors are ``(B, T)``, detached unless noted."""

    logp: torch.Tensor
    """Trainer log-probs of the sampled tokens under the current weights (differentiable)."""
    old_logp: torch.Tensor
    """``log pi_old``: recomputed by the trainer or taken from the rollout (TIM, V3)."""
    roll_logp: torch.Tensor
    """The rollout engine's log-probs (the sampling distribution)."""
    mask: torch.Tensor
    """Response tokens (bool), up to and including EOS."""
    adv: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    """Per-token correction weight (1 = untouched, 0 = masked); ``None`` means all ones."""
    rewards: torch.Tensor | None = None
    """``(B,)`` outcome rewards."""
    group_ids: torch.Tensor | None = None
    """``(B,)`` prompt index of each response."""
    sum_p2: torch.Tensor | None = None
    """``sum_v pi_old(v)^2`` per token, for OTB's energy."""
    tok_kl: torch.Tensor | None = None
    """Exact ``KL(pi_roll || pi_old)`` per token, for TRM's exact mode."""
    logits: torch.Tensor | None = None
    """``(B, T, V)`` rollout logits, for DVP's kept set."""
    keep: torch.Tensor | None = None
    """``(B, T, V)`` bool kept vocabulary the sampler used (DVP), if it pruned."""
    tokens: torch.Tensor | None = None
    """``(B, T)`` sampled token ids."""
    active: torch.Tensor | None = None
    """Tokens of the current update pass (Lopti); ``None`` means every response token. The
    loss still normalises by all response tokens (LOPTI, L3)."""
    train_logp: torch.Tensor | None = None
    """The trainer's recomputed log-probs at ``pi_old``'s weights (``pi_train``); ``None`` means
    ``old_logp`` is them (recompute). Under bypass ``old_logp`` is the rollout's, so this field
    is what keeps the mismatch ratio alive (TIM, V3/V4)."""
    trm_accept: torch.Tensor | None = None
    """``(B,)`` bool: TRM's sampled-token acceptance (k2 / k3 of ``log_rho``) at the run's
    thresholds, computed once per step by the trainer (its ``trm/accept_rate`` monitor) and
    reused by the ``trm`` method; ``None``: the method computes it."""
    entropy: torch.Tensor | None = None
    """``(B, T)`` entropy of the trainer's distribution at ``pi_old``'s weights over the full
    vocabulary (the kept one under DVP), at the sampling temperature: the ``entropy`` of the
    ``pi_old`` forward's ``token_stats``, no second forward. Read by ``top_entropy`` (arXiv
    2506.01939)."""
    seed: int | None = None
    step: int | None = None
    """The run's seed and the step's index, set by the trainer; ``random_tokens`` seeds its mask
    from them (``None``: a batch built outside a run, which that method refuses)."""

    @cached_property
    def log_rho(self) -> torch.Tensor:
        """Mismatch log-ratio ``log pi_train - log pi_roll`` in both ``pi_old`` modes (TIM, V4).

        Under recompute ``pi_train = pi_old``; under bypass ``pi_old = pi_roll``, so
        ``old_logp - roll_logp`` would be identically 0. Computed once per batch (a
        ``dataclasses.replace`` makes a new batch, which computes its own).
        Shapes: (B, T).
        """
        train = self.old_logp if self.train_logp is None else self.train_logp
        return (train - self.roll_logp).detach()


@dataclass(frozen=True)
class MethodParams:
    """Hyperparameters of the methods; ``TrainConfig`` extends this class."""

    eps_low: float = 0.2
    """Lower clip ``1 - eps_low`` of the ratio: CLIP_LOW = 0.20 in LOPTI's K&K run scripts."""
    eps_high: float = 0.24
    """Upper clip ``1 + eps_high``: CLIP_HIGH = 0.24 in LOPTI's K&K run scripts."""
    alpha: float = 0.3
    """Advantage Reweighting strength: 0.3 on K&K in LOPTI (REWEIGHT_K; 0 = plain GRPO)."""
    eta: float = 0.5
    """Lopti's probability threshold: 0.5 in LOPTI (SEPERATE_PROB)."""
    tis_cap: float = 2.0
    """Token TIS cap ``C`` in ``min(rho_t, C)`` (``tis``); our choice (TIM names no value we could
    read; verl's rollout_is_threshold default is also 2.0)."""
    seq_tis_cap: float = 2.0
    """Sequence TIS cap ``C`` in ``min(prod_t rho_t, C)`` (``seq_tis``): verl's
    rollout_is_threshold default (2.0)."""
    mis_low: float = 0.5
    mis_high: float = 2.0
    """Band on the sequence ratio ``prod_t rho_t``: ``mis`` weighs by it inside, ``seq_reject``
    keeps (weight 1) inside; 0 outside. Our choice, symmetric in log space."""
    geo_low: float = 0.999
    geo_high: float = 1.001
    """``geo_reject``'s band on the geometric mean ``exp(mean_t log rho_t)``: our choice, a band of
    width 1e-3 each side of 1 (a per-token average, so far narrower than the sequence bands)."""
    icepop_low: float = 0.5
    icepop_high: float = 2.0
    """Token band on ``rho_t``: ``icepop`` weighs by ``rho_t`` inside, ``token_reject`` keeps
    (weight 1) inside; 0 outside. Our choice, symmetric in log space."""
    loss_agg: str = "token-mean"
    """Loss aggregation (``tailtheory.engine.methods.LOSS_AGGS``): ``token-mean`` (LOPTI's run
    scripts; DAPO, TRL's dapo / bnpo), ``seq-mean-token-mean`` (the original GRPO, TRL's grpo) or
    ``seq-mean-token-sum-norm`` (Dr. GRPO). The ``dr_grpo`` loss always uses the last."""
    loss_norm_len: int = 0
    """Dr. GRPO's constant in ``seq-mean-token-sum-norm``; 0 means the batch's padded response
    length T (verl's loss_scale_factor = None). TRL uses max_completion_length."""
    clip_ratio_c: float | None = None
    """Dual-clip constant ``c > 1`` (dual-clip PPO, arXiv 1912.09729): for ``A < 0`` the token
    loss is ``min(PPO loss, -c A)``; verl's default is 3.0; None (off) keeps plain PPO clipping."""
    trm_mode: str = "max"
    """TRM criterion (``tailtheory.core.estimators.CRITERIA``): ``max``, ``avg`` or ``both``."""
    trm_estimator: str = "exact"
    """``exact`` (full-vocabulary KL, needs the rollout logits) or ``k2k3`` (sampled token)."""
    trm_delta_max: float = 0.05
    trm_delta_avg: float = 0.01
    """TRM thresholds on the max / average token KL; our choice at toy scale."""
    dvp_rule: str = "min_p"
    """DVP pruning rule (``tailtheory.core.safeset.RULES``); min-p is DVP's default."""
    dvp_rho: float = 1e-6
    """DVP threshold: inside the 1e-4 .. 1e-8 range given for DVP."""
    upweight_c: float = 0.2
    """``upweight``'s strength ``c`` in ``A <- (1 + c - c pi_old) A``: 0.2, the value of the
    published 7B training scripts of arXiv 2603.22117 (0.1 at 8B); 0 is plain GRPO."""
    token_fraction: float = 0.2
    """The share of a step's response tokens that ``top_entropy`` (the highest-entropy ones,
    arXiv 2506.01939's rho = 0.2) and ``random_tokens`` (a random draw, the control of arXiv
    2605.07660) keep in the loss; the others weigh 0 and still count in its denominators."""
    temperature: float = 1.0
    """Sampling temperature; 1.0 as the warm start's accuracy window is measured at it
    (LOPTI samples at 0.7 on large models)."""


class MethodFn(Protocol):
    """The signature of every registered method (the stage decides what ``value`` is).

    Arguments:
        b: the step's :class:`PolicyBatch`; a method reads it and never changes it.
        hp: the run's :class:`MethodParams`, already validated (a ``TrainConfig`` is one).

    Returns ``(value, metrics)``: ``value`` by stage (``engine/registry.py``): kept vocabulary
    ``(B, T, V)`` bool (vocab), advantages ``(B, T)`` (advantage, reweight), token weights
    ``(B, T)`` (correction), ``[(name, pass mask (B, T))]`` (schedule), a scalar loss (loss);
    ``metrics`` the method's namespaced :data:`Metrics`, the keys it declared at registration.
    """

    def __call__(self, b: PolicyBatch, hp: MethodParams) -> tuple[Any, Metrics]: ...
