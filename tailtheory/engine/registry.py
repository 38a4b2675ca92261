"""The method registry: GRPO-family policy losses and every correction the papers propose.

Every method is a :class:`~tailtheory.engine.types.MethodFn`, ``fn(b, hp) -> (value, metrics)``,
registered under its name with the stage it acts at and the metric keys it reports:

| stage      | names                       | value                                    |
|------------|-----------------------------|------------------------------------------|
| vocab      | dvp                         | kept vocabulary ``(B, T, V)`` bool       |
| advantage  | otb                         | advantages ``(B, T)``                    |
| reweight   | ar, upweight                | advantages ``(B, T)``                    |
| correction | tis, seq_tis, mis, icepop,  | token weights ``(B, T)`` (0 = masked)    |
|            | token_reject, seq_reject,   |                                          |
|            | geo_reject, trm,            |                                          |
|            | top_entropy, random_tokens  |                                          |
| schedule   | lopti, lopti_reversed       | ``[(name, pass mask (B, T))]``           |
| loss       | grpo, dr_grpo               | scalar loss (aggregated by ``loss_agg``) |

A method spec such as ``"ar+lopti"`` or ``["tis", "mis"]`` is parsed once by
:func:`parse_methods`; the loss defaults to ``grpo``, whose group advantages are used unless
``otb`` is named.

Where the methods live: the engine's own (the ``grpo`` and ``dr_grpo`` losses) in
``engine/methods.py``; each paper's in its section, ``tailtheory/<section>/methods.py``
(``lopti``: ar, lopti, lopti_reversed and the opposite claims' upweight, top_entropy,
random_tokens; ``pruning``: dvp; ``trm``: trm; ``otb``: otb; ``tim``:
the mismatch corrections). This module never imports them, by name or otherwise: on first
use, the lookups below load the package's catalog
(:func:`tailtheory.core.registry.load_catalog`), which imports every module that registers
methods.

A method may declare at registration how its hyperparameters are checked (``validate``, a
function of :class:`~tailtheory.engine.types.MethodParams` that raises ``ValueError``);
:func:`validate_params` runs the checks of every registered method, so a config's
hyperparameters are checked whatever method it names.
Sources: LOPTI (L2, L3), the opposite claims (L7-L9), DVP (P3), TRM (T12), OTB, TIM (V3, V4).
Shapes: ``B`` sequences, ``T`` response tokens, ``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Callable, Mapping

import torch

from tailtheory.core.registry import load_catalog
from tailtheory.engine.types import MethodFn, MethodParams, Metrics, PolicyBatch

STAGES = ("vocab", "advantage", "reweight", "correction", "schedule", "loss")
"""The order in which the trainer applies the stages of a method spec."""

Validator = Callable[[MethodParams], None]
"""``fn(hp)``: raises ``ValueError`` when a hyperparameter the method reads is out of range."""


@dataclass(frozen=True)
class Method:
    """A registered method: its name, stage, pure function, source and one-line summary."""

    name: str
    stage: str
    fn: MethodFn
    source: str
    summary: str
    metrics: tuple[str, ...] = ()
    """The metric keys the method adds to a step's line (exactly those it returns)."""
    advantage: MethodFn | None = None
    """For a loss: the group advantage it uses unless an advantage-stage method is named."""
    validate: Validator | None = None
    """The check of the hyperparameters the method reads (``None``: it reads none of its own)."""


_METHODS: dict[str, Method] = {}


def register(name: str, stage: str, source: str, metrics: tuple[str, ...] = (),
             advantage: MethodFn | None = None, validate: Validator | None = None):
    """Decorator: register ``fn`` as ``name``; its docstring's first line is the summary.

    ``validate(hp)`` checks the hyperparameters the method reads and raises ``ValueError``
    (several methods may share one). A name that is already registered raises (two methods
    never share a name).
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    if name in _METHODS:
        raise ValueError(f"method {name!r} is already registered "
                         f"(by {_METHODS[name].fn.__module__}.{_METHODS[name].fn.__qualname__})")
    if any("/" not in k for k in metrics):
        raise ValueError(f"metric keys must be namespaced ('stage/name'), got {metrics}")

    def deco(fn: MethodFn) -> MethodFn:
        summary = (fn.__doc__ or "").strip().splitlines()[0]
        _METHODS[name] = Method(name, stage, fn, source, summary, tuple(metrics), advantage,
                                validate)
        return fn
    return deco


def registered() -> Mapping[str, Method]:
    """Every registered method by name (read-only), every methods module imported first."""
    load_catalog()
    return MappingProxyType(_METHODS)


def validate_params(hp: MethodParams) -> None:
    """Run the hyperparameter check of every registered method on ``hp`` (each distinct check
    once, in registration order); the first out-of-range value raises ``ValueError``."""
    seen: list[Validator] = []
    for m in registered().values():
        if m.validate is not None and m.validate not in seen:
            seen.append(m.validate)
            m.validate(hp)


def get_method(name: str) -> Method:
    """The registered method called ``name``; an unknown name lists the valid ones."""
    methods = registered()
    if name not in methods:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(sorted(methods))}")
    return methods[name]


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

    @property
    def methods(self) -> tuple[Method, ...]:
        """Every method of the spec, in stage order."""
        one = (self.vocab, self.advantage, self.reweight)
        return tuple(m for m in (*one, *self.corrections, self.schedule, self.loss) if m)

    @property
    def metric_keys(self) -> frozenset[str]:
        """The metric keys the spec's methods add to a step's line."""
        return frozenset(k for m in self.methods for k in m.metrics)


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
    loss = one["loss"] or get_method("grpo")
    ordered = tuple(names)
    if loss.name not in ordered:
        ordered = (loss.name,) + ordered
    return MethodSpec(loss=loss, advantage=one["advantage"], reweight=one["reweight"],
                      corrections=tuple(by_stage["correction"]), schedule=one["schedule"],
                      vocab=one["vocab"], names=ordered)


# ---- the stages, applied in order by the trainer ------------------------------------------------

def advantages(spec: MethodSpec, b: PolicyBatch, hp: MethodParams) -> tuple[torch.Tensor, Metrics]:
    """Advantages of ``b`` under ``spec``: the advantage stage (or the loss's own), then
    reweighting. Returns ``(adv (B, T), metrics)``."""
    fn = spec.advantage.fn if spec.advantage else spec.loss.advantage
    adv, metrics = fn(b, hp)
    if spec.reweight:
        adv, more = spec.reweight.fn(replace(b, adv=adv), hp)
        metrics = {**metrics, **more}
    return adv, metrics


def correction_weight(spec: MethodSpec, b: PolicyBatch,
                      hp: MethodParams) -> tuple[torch.Tensor, Metrics]:
    """The product of every correction's token weight. Returns ``(weight (B, T), metrics)``."""
    w = torch.ones_like(b.old_logp)
    metrics: Metrics = {}
    for m in spec.corrections:
        wm, more = m.fn(b, hp)
        w = w * wm
        metrics.update(more)
    return w, metrics


def passes(spec: MethodSpec, b: PolicyBatch, hp: MethodParams):
    """The update passes: one over every response token, or the schedule's groups.
    Returns ``([(name, pass mask (B, T))], metrics)``."""
    if spec.schedule is None:
        return [("all", b.mask)], {}
    return spec.schedule.fn(b, hp)


__all__ = ["STAGES", "Method", "MethodSpec", "Validator", "register", "registered", "get_method",
           "validate_params", "parse_methods", "advantages", "correction_weight", "passes"]
