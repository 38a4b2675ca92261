"""The method registry: GRPO-family policy losses and every correction the papers propose.

Every method is a pure function with one signature, ``fn(b: PolicyBatch, hp: MethodParams) ->
(value, metrics)``, registered under its name with the stage it acts at:

| stage      | names                       | value                                    |
|------------|-----------------------------|------------------------------------------|
| vocab      | dvp                         | kept vocabulary ``(B, T, V)`` bool       |
| advantage  | otb                         | advantages ``(B, T)``                    |
| reweight   | ar                          | advantages ``(B, T)``                    |
| correction | tis, mis, icepop, trm       | token weights ``(B, T)`` (0 = masked)    |
| schedule   | lopti, lopti_reversed       | ``[(name, pass mask (B, T))]``           |
| loss       | grpo, dr_grpo               | scalar loss                              |

A method spec such as ``"ar+lopti"`` or ``["tis", "mis"]`` is parsed once by
:func:`parse_methods`; the loss defaults to ``grpo``, whose group advantages are used unless
``otb`` is named. Sources: LOPTI (L2, L3), DVP (P3), TRM (T12), OTB, TIM (V3, V4).
Shapes: ``B`` sequences, ``T`` response tokens, ``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from tailtheory.mismatch import corrections as masks

STAGES = ("vocab", "advantage", "reweight", "correction", "schedule", "loss")
"""The order in which the trainer applies the stages of a method spec."""


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

    @property
    def log_r(self) -> torch.Tensor:
        """Mismatch log-ratio ``log pi_train - log pi_roll`` in both ``pi_old`` modes (TIM, V4).

        Under recompute ``pi_train = pi_old`` (bitwise the old definition); under bypass
        ``pi_old = pi_roll``, so ``old_logp - roll_logp`` would be identically 0.
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
    """Token TIS cap ``C`` in ``min(r, C)``; our choice (TIM names no value we could read)."""
    mis_low: float = 0.5
    mis_high: float = 2.0
    """Sequence-masking band on the sequence ratio; our choice, symmetric in log space."""
    mis_geometric: bool = False
    """Mask on the geometric mean of the token ratios instead of their product."""
    icepop_low: float = 0.5
    icepop_high: float = 2.0
    """IcePop token band on ``r_t``; our choice, symmetric in log space."""
    trm_mode: str = "max"
    """TRM criterion (``tailtheory.trm.mask.CRITERIA``): ``max``, ``avg`` or ``both``."""
    trm_estimator: str = "exact"
    """``exact`` (full-vocabulary KL, needs the rollout logits) or ``k2k3`` (sampled token)."""
    trm_delta_max: float = 0.05
    trm_delta_avg: float = 0.01
    """TRM thresholds on the max / average token KL; our choice at toy scale."""
    dvp_rule: str = "min_p"
    """DVP pruning rule (``tailtheory.pruning.vocab.RULES``); min-p is THEORY.md's default."""
    dvp_rho: float = 1e-6
    """DVP threshold: inside the 1e-4 .. 1e-8 range of THEORY.md section 3."""
    temperature: float = 1.0
    """Sampling temperature; 1.0 as the warm start's accuracy window is measured at it
    (LOPTI samples at 0.7 on large models)."""


@dataclass(frozen=True)
class Method:
    """A registered method: its name, stage, pure function, source and one-line summary."""

    name: str
    stage: str
    fn: Callable
    source: str
    summary: str
    advantage: Callable | None = None
    """For a loss: the group advantage it uses unless an advantage-stage method is named."""


METHODS: dict[str, Method] = {}


def register(name: str, stage: str, source: str, advantage: Callable | None = None):
    """Decorator: add ``fn`` to :data:`METHODS`; its docstring's first line is the summary."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")

    def deco(fn: Callable) -> Callable:
        summary = (fn.__doc__ or "").strip().splitlines()[0]
        METHODS[name] = Method(name, stage, fn, source, summary, advantage)
        return fn
    return deco


def get_method(name: str) -> Method:
    """The registered method called ``name``; an unknown name lists the valid ones."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]


@dataclass(frozen=True)
class MethodSpec:
    """A parsed method spec: at most one method per stage, several corrections."""

    loss: Method
    advantage: Method | None = None
    reweight: Method | None = None
    corrections: tuple[Method, ...] = ()
    schedule: Method | None = None
    vocab: Method | None = None
    names: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        return "+".join(self.names)


def parse_methods(spec: str | list[str] | tuple[str, ...]) -> MethodSpec:
    """Parse ``"ar+lopti"`` or ``["tis", "mis"]`` into a :class:`MethodSpec`, checking each name.

    Corrections stack (``tis+mis``); every other stage takes at most one method.
    """
    names = [n.strip() for n in (spec.split("+") if isinstance(spec, str) else spec)]
    if not names or any(not n for n in names):
        raise ValueError(f"method spec {spec!r} has an empty name")
    if len(set(names)) != len(names):
        raise ValueError(f"method spec {spec!r} names a method twice")
    by_stage: dict[str, list[Method]] = {s: [] for s in STAGES}
    for n in names:
        m = get_method(n)
        by_stage[m.stage].append(m)
    for stage, ms in by_stage.items():
        if stage != "correction" and len(ms) > 1:
            raise ValueError(f"method spec {spec!r} combines {[m.name for m in ms]}: at most one "
                             f"{stage} method")
    one = {s: (ms[0] if ms else None) for s, ms in by_stage.items()}
    loss = one["loss"] or METHODS["grpo"]
    ordered = tuple(n for n in names)
    if loss.name not in ordered:
        ordered = (loss.name,) + ordered
    return MethodSpec(loss=loss, advantage=one["advantage"], reweight=one["reweight"],
                      corrections=tuple(by_stage["correction"]), schedule=one["schedule"],
                      vocab=one["vocab"], names=ordered)


def advantages(spec: MethodSpec, b: PolicyBatch, hp: MethodParams):
    """Advantages of ``b`` under ``spec``: the advantage stage (or the loss's own), then
    reweighting. Returns ``(adv (B, T), metrics)``."""
    fn = spec.advantage.fn if spec.advantage else spec.loss.advantage
    adv, metrics = fn(b, hp)
    if spec.reweight:
        adv, more = spec.reweight.fn(replace(b, adv=adv), hp)
        metrics = {**metrics, **more}
    return adv, metrics


def correction_weight(spec: MethodSpec, b: PolicyBatch, hp: MethodParams):
    """The product of every correction's token weight. Returns ``(weight (B, T), metrics)``."""
    w = torch.ones_like(b.old_logp)
    metrics: dict[str, float] = {}
    for m in spec.corrections:
        wm, more = m.fn(b, hp)
        w = w * wm
        metrics.update(more)
    return w, metrics


def passes(spec: MethodSpec, b: PolicyBatch, hp: MethodParams):
    """The update passes: one over every response token, or the schedule's groups."""
    if spec.schedule is None:
        return [("all", b.mask)], {}
    return spec.schedule.fn(b, hp)


from tailtheory.engine import methods as _methods  # noqa: E402,F401  (registers every method)
