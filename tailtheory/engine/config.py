"""``TrainConfig``: every knob of a GRPO run, frozen, each default with its source.

The method hyperparameters come from :class:`~tailtheory.engine.types.MethodParams` (this class
extends it, so a ``TrainConfig`` is the ``MethodParams`` every method receives), so a knob has
exactly one default. The whole config is validated once, when it is built (this module is its
edge): the method spec is parsed there and kept (:attr:`TrainConfig.spec`), and the methods
pass the checked values to the formulas without checking them again (the formulas, public
functions of their papers, keep their own argument checks). Sweeps use ``dataclasses.replace``; the CLI
generates one ``--flag`` per field.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields

from tailtheory.core.checks import check_positive_int
from tailtheory.engine.devices import DEVICES
from tailtheory.engine.registry import MethodSpec, parse_methods, validate_params
from tailtheory.engine.rollout.engine import BACKENDS, DEFAULT_BACKEND, HF, PATHS, SAMPLERS
from tailtheory.engine.rollout.noise import check_noise
from tailtheory.engine.start.rungs import BASE, RUNG_TASKS, rung
from tailtheory.engine.tasks.task import TASKS
from tailtheory.engine.threads import check_threads
from tailtheory.engine.types import MethodParams

PI_OLD = ("recompute", "bypass")
"""How ``pi_old`` is obtained (TIM, V3): a trainer forward, or the rollout's own log-probs."""

IDENTITY = {
    "length": "how many steps it makes (a run's first n lines are those of a run of n steps)",
    "place": "where and how often it is written to disk (its directory, checkpoint spacing)",
    "speed": "how fast it runs (torch CPU threads); the numbers are the same",
    "output": "what it writes beside its metric lines (per-token dumps); the lines are the same",
    "monitor": "what it measures beside the training (held-out evaluation); the training is the "
               "same",
    "replicate": "which draw of its experiment it is (the seed)",
    "machine": "what it computes on (the device): other rounding, the same experiment",
}
"""Why a :class:`TrainConfig` field is outside some part of a run's identity: the field's
``metadata["identity"]`` (a field without one is part of what a run computes). Each use of the
identity names the kinds it leaves out: :data:`RESUME_FREE`, ``runs.NOT_IN_KEY`` (the run
cache's key), ``plot.NOT_A_DIFFERENCE`` (the labels of a plot's groups)."""

ADDED_DEFAULTS: dict[str, object] = {"micro_batch": 64, "filter_zero_var": False,
                                      "rollout_backend": HF, "rollout_noise": 0.0,
                                      "update_memory": "batch", "sampler": "multinomial",
                                      "rung": BASE, "upweight_c": 0.2,
                                      "token_fraction": 0.2}
"""Fields added after runs were first cached, with the default that computes what the engine
computed before they existed. A run key or a stored-config comparison leaves such a field out
while it holds this default, so earlier cached runs and stored measurements stay valid."""


UPDATE_MEMORY = ("batch", "micro-batch")
"""``TrainConfig.update_memory``'s values."""


def without_added_defaults(fields: dict) -> dict:
    """``fields`` less every :data:`ADDED_DEFAULTS` entry that is absent or at its default."""
    return {k: v for k, v in fields.items()
            if not (k in ADDED_DEFAULTS and v == ADDED_DEFAULTS[k])}


@dataclass(frozen=True)
class TrainConfig(MethodParams):
    """One GRPO run: task, model, method, rollout path and optimisation."""

    task: str = "kk"
    """Task name (``tailtheory.engine.tasks.task.TASKS``)."""
    n_people: int = 3
    """Knights-and-Knaves people (``kk`` and ``kk_trace``): 3 leaves room for RL (guessing
    scores 1/8)."""
    model: str = "warm"
    """``warm`` (the task's supervised warm start), ``tiny`` (random tiny LM, for tests) or a
    path to a causal LM saved with its tokenizer beside it (``save_pretrained``); the task's text
    goes through that tokenizer (and its chat template), and the run cache keys on what the
    folder holds."""
    rung: str = BASE
    """The model-size ladder's rung (``tailtheory.engine.start.rungs``) whose warm start a
    ``warm`` run of ``kk_prose`` (2 people) starts from: ``base`` (today's ``matched`` model) or a
    larger one (``tailtheory ladder list``)."""
    method: str = "grpo"
    """Method spec, e.g. ``grpo``, ``ar+lopti``, ``tis+mis`` (``tailtheory methods``)."""
    rollout: str = "bf16"
    """Rollout path (``tailtheory.engine.rollout.engine.PATHS``): exact, bf16, fp16, kv, fp8,
    logit_noise, weight_noise (the last two need ``rollout_noise`` > 0)."""
    rollout_noise: float = 0.0
    """``sigma`` of the noise rollout paths (``tailtheory.engine.rollout.noise``, V6): the standard
    deviation of the i.i.d. Gaussian noise added to every logit (``logit_noise``) or of the
    relative Gaussian error of every block Linear weight (``weight_noise``), drawn from
    generators seeded by the run's seed and step. Must be > 0 on those paths, 0 on the others."""
    rollout_backend: str = DEFAULT_BACKEND
    """Decoder of the rollouts and of the held-out evaluation: ``fast`` (the inference engine of
    ``tailtheory.engine.rollout.fast``, a forward of its own: the real mismatch source of the
    non-exact paths: Qwen2 and Llama architectures; a run of any other model is refused before
    it starts, naming ``hf``) or ``hf`` (the Hugging Face model's own KV-cache forward; runs
    cached before the field existed used it)."""
    pi_old: str = "recompute"
    """``recompute`` or ``bypass`` (TIM, V3)."""
    steps: int = field(default=200, metadata={"identity": "length"})
    """Optimiser steps (a Lopti step makes two updates)."""
    seed: int = field(default=0, metadata={"identity": "replicate"})
    """Seeds the model (``tiny``), the sampler's generator and the problem stream."""
    prompts_per_step: int = 8
    """Prompts per step; LOPTI uses 64 (TRAIN_BS), 8 keeps a toy step near a second."""
    group_size: int = 8
    """Responses per prompt ``G``: 8 as in LOPTI's run scripts (ROLLOUT_N)."""
    max_new_tokens: int = 0
    """Response cap; 0 means the task's ``max_response_len``."""
    lr: float = 1e-4
    """AdamW learning rate; toy scale (LOPTI uses 1e-6 on 3B-7B models; the warm start 1e-3)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay; 0 keeps the update the loss's alone."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; verl's actor default (grad_clip = 1.0)."""
    checkpoint_every: int = field(default=50, metadata={"identity": "place"})
    """Steps between checkpoints (the last step always writes one); verl's save_freq is 20."""
    dump_tokens: bool = field(default=False, metadata={"identity": "output"})
    """Write per-token probabilities, advantages and log-ratios to ``RUN/tokens/*.parquet``."""
    out: str = field(default="runs/default", metadata={"identity": "place"})
    """Run directory: ``metrics.jsonl``, ``checkpoint.pt``, ``config.json``."""
    device: str = field(default="auto", metadata={"identity": "machine"})
    """``auto`` (a CUDA GPU when one is visible, else the CPU), ``cpu`` or ``cuda`` (an error
    without a GPU)."""
    eval_every: int = field(default=10, metadata={"identity": "monitor"})
    """Steps between held-out accuracy evaluations (``eval/accuracy``, at steps 0, k, 2k, ...);
    0 turns them off."""
    eval_n: int = field(default=64, metadata={"identity": "monitor"})
    """Held-out problems per evaluation (the warm start's, never trained on); standard error
    at most 0.063."""
    threads: int = field(default=0, metadata={"identity": "speed"})
    """torch CPU threads; 0 picks one for small models on the CPU (several times faster than
    torch's default when the cores are busy). Changes speed only, so a resume may change it."""
    filter_zero_var: bool = False
    """Leave out of the loss, denominators included, the groups whose rewards are all equal
    (their group advantage is 0; they only dilute a token mean): DAPO's dynamic sampling without
    the resampling. Off by default; ``adv/zero_var_frac`` logs their share."""
    micro_batch: int = 64
    """Rows per forward / backward of the trainer (0: the whole batch at once). A step of more
    rows runs in micro-batches of rows of similar length, each trimmed to its own longest row:
    the same loss, 1.4x to 4x faster on this CPU at 256 rows (``benchmarks/bench_step.py``);
    equal to the whole-batch step up to float32 rounding, so batches of at most this many rows
    compute bitwise what they computed before the field existed."""
    sampler: str = "multinomial"
    """How the rollout draws a token from its probabilities (``tailtheory.engine.rollout.engine.SAMPLERS``):
    ``multinomial`` (every stored run's) or ``inverse-cdf`` (one uniform a row instead of one
    exponential a vocabulary entry: the same distribution, other tokens from the same seed;
    the text-sized benchmark's rollout spent two fifths of its time in ``multinomial``'s draws).
    The held-out evaluation samples with ``multinomial`` either way."""
    update_memory: str = "batch"
    """What the update keeps alive (:data:`UPDATE_MEMORY`). ``batch``: the ``pi_old`` forward
    keeps its graph over every row and serves the first update pass (the fewest FLOPs; memory
    grows with rows x tokens: 12.5 GB at 256 rows of ~175 tokens of a width-256, 6-layer model
    with 8,192 ids, ``benchmarks/bench_step.py --workload text``). ``micro-batch``: no graph is
    kept; each pass takes the loss's gradient with respect to the log-probs first, then runs
    forward and backward one micro-batch at a time, so only one micro-batch's activations are
    alive (one more forward a pass: ~1.3x the update's FLOPs). Where the first pass's gradient
    reads no ``pi_old`` value (plain GRPO or Dr. GRPO with ``pi_old`` recomputed:
    ``engine/update_plan.py``), it is known before the ``pi_old`` forward, which then carries it
    back micro-batch by micro-batch: no extra forward. The same loss and metrics, the same
    gradient up to float32 rounding."""

    def __post_init__(self):
        object.__setattr__(self, "_spec", _validate(self))  # parsed once, with the checks

    @property
    def spec(self) -> MethodSpec:
        """The parsed :attr:`method` (parsed once, when the config was built)."""
        return self._spec

    def to_dict(self) -> dict:
        return asdict(self)

    def fingerprint(self) -> str:
        """Hash of every field a resumed run must keep (all but :data:`RESUME_FREE`)."""
        kept = {k: v for k, v in without_added_defaults(asdict(self)).items()
                if k not in RESUME_FREE}
        return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def identity_fields(*kinds: str) -> tuple[str, ...]:
    """The :class:`TrainConfig` fields marked with one of ``kinds`` (:data:`IDENTITY`), in
    field order."""
    unknown = sorted(set(kinds) - set(IDENTITY))
    if unknown:
        raise ValueError(f"unknown identity kind(s) {unknown}; kinds: {', '.join(IDENTITY)}")
    return tuple(f.name for f in fields(TrainConfig) if f.metadata.get("identity") in kinds)


RESUME_FREE = identity_fields("length", "place", "speed", "output", "monitor")
"""Fields a resumed run may change (everything else must match the checkpoint's config): how
long it runs, where it is written, how fast, what it writes and measures beside its lines."""


def _positive(c: TrainConfig, *names: str) -> None:
    for name in names:
        x = getattr(c, name)
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(f"{name} must be a finite number > 0, got {x}")


def _validate(c: TrainConfig) -> MethodSpec:
    """Every check of ``c``, run once when it is built; returns the parsed method spec."""
    if c.task not in TASKS:
        raise ValueError(f"unknown task {c.task!r}; valid tasks: {', '.join(sorted(TASKS))}")
    if c.rung != BASE:
        rung(c.rung)                                   # an unknown name lists the ladder
        if c.model != "warm" or RUNG_TASKS.get(c.task, (None,))[0] != c.n_people:
            tasks = ", ".join(f"task {t!r} with n_people {n}" for t, (n, _) in RUNG_TASKS.items())
            raise ValueError(f"rung {c.rung!r} is a size of a recipe's warm start: it needs model "
                             f"'warm' and one of {tasks} (got {c.task!r}, {c.n_people}, "
                             f"{c.model!r})")
    spec = parse_methods(c.method)
    if c.rollout not in PATHS:
        raise ValueError(f"unknown rollout {c.rollout!r}; valid rollout paths: {', '.join(PATHS)}")
    if c.rollout_backend not in BACKENDS:
        raise ValueError(f"unknown rollout_backend {c.rollout_backend!r}; valid: "
                         f"{', '.join(BACKENDS)}")
    check_noise(c.rollout, c.rollout_noise, "rollout_noise", allow_zero=False)
    if c.pi_old not in PI_OLD:
        raise ValueError(f"pi_old must be one of {PI_OLD}, got {c.pi_old!r}")
    for name in ("steps", "prompts_per_step", "group_size", "checkpoint_every"):
        check_positive_int(getattr(c, name), name)
    check_positive_int(c.seed, "seed", minimum=0)
    check_positive_int(c.max_new_tokens, "max_new_tokens", minimum=0)
    check_positive_int(c.eval_every, "eval_every", minimum=0)
    check_positive_int(c.eval_n, "eval_n")
    check_positive_int(c.micro_batch, "micro_batch", minimum=0)
    if c.sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {c.sampler!r}")
    if c.update_memory not in UPDATE_MEMORY:
        raise ValueError(f"update_memory must be one of {UPDATE_MEMORY}, got {c.update_memory!r}")
    if c.update_memory == "micro-batch" and not c.micro_batch:
        raise ValueError("update_memory 'micro-batch' needs micro_batch > 0 (rows a micro-batch); "
                         "micro_batch 0 runs the whole batch at once")
    check_threads(c.threads)  # resolved once the model's size is known (trainer.train)
    if c.device not in DEVICES:
        raise ValueError(f"unknown device {c.device!r}; valid devices: {', '.join(DEVICES)}")
    if c.group_size < 2 and spec.advantage is None:
        raise ValueError(f"group_size {c.group_size} with the group baseline of "
                         f"{spec.loss.name!r}: a group of one has no baseline (use >= 2)")
    _positive(c, "lr", "temperature")
    if not c.max_grad_norm > 0:  # inf: no clipping
        raise ValueError(f"max_grad_norm must be > 0, got {c.max_grad_norm}")
    if not (c.weight_decay >= 0 and math.isfinite(c.weight_decay)):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {c.weight_decay}")
    _validate_method_params(c)
    if spec.loss.name == "dr_grpo" and c.loss_agg not in ("token-mean", "seq-mean-token-sum-norm"):
        raise ValueError(f"the dr_grpo loss aggregates seq-mean-token-sum-norm; got loss_agg "
                         f"{c.loss_agg!r} (use grpo with --loss-agg, or drop --loss-agg)")
    return spec


def _validate_method_params(c: MethodParams) -> None:
    """The method hyperparameters: names, ranges, bands (low < high) and caps (> 0), each checked
    by the method that reads it (its ``validate`` at registration); every registered method's
    check runs, whatever method ``c`` names."""
    validate_params(c)


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field of ``cls`` and its bases (for ``--help``)."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        names: list[str] = []
        for node in body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.append(node.target.id)
            elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str) and names):
                for n in names:  # a docstring after several fields documents them all
                    docs[n] = " ".join(node.value.value.split())
                names = []
            if isinstance(node, ast.Expr):
                names = []
    return docs


def add_config_arguments(parser, cls=None) -> None:
    """One ``--flag`` per field of ``cls`` (default ``TrainConfig``), typed, with its docstring."""
    import argparse
    import typing

    cls = cls or TrainConfig
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    own_first = sorted(fields(cls), key=lambda f: f.name in MethodParams.__dataclass_fields__)
    for f in own_first:
        flags = [f"--{f.name.replace('_', '-')}"]
        kind = _optional_parser(hints[f.name])
        help_ = f"{docs.get(f.name, '')} (default: {f.default})".replace("%", "%%")  # argparse
        if kind is bool:
            parser.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=f.default, help=help_)
        else:
            parser.add_argument(*flags, dest=f.name, type=kind, default=f.default, help=help_,
                                metavar=f.name.upper())


def _optional_parser(kind):
    """``X | None`` -> a parser of ``X`` that reads ``none`` / ``off`` as None; else ``kind``."""
    import types
    import typing

    args = typing.get_args(kind)
    if not (typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args):
        return kind
    (inner,) = [a for a in args if a is not type(None)]

    def parse(text: str):
        return None if text.strip().lower() in ("none", "off") else inner(text)
    parse.__name__ = inner.__name__  # argparse names the type in its error message
    return parse


def config_from_args(args, cls=None):
    """The config whose fields are the parsed ``args`` of :func:`add_config_arguments`."""
    cls = cls or TrainConfig
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})
