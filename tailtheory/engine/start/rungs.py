"""The rungs of the model-size ladder: the ``matched`` testbed's architecture at several sizes.

A rung names a width and a depth; everything else follows one rule, defined here only (the
ladder's commands and records: :mod:`tailtheory.ladder.build`):

- **Shape**: width ``w`` and depth ``L`` grow together; heads of 32 (``w / 32`` query heads,
  half as many key-value heads), MLP ``2w``, untied head, vocabulary 4,096 (the corpus BPE).
  Non-embedding parameters (everything but the input embedding and the output head):
  :func:`non_embedding_params`, ``L (9 w^2 + 4w) + w``.
- **Pretraining** (:mod:`tailtheory.engine.start.corpus_lm`): the base rung's 600 steps of 16
  windows of 128 tokens times the square root of the rung's non-embedding ratio to the base; the
  corpus holds about 1.02M training tokens, so the larger rungs repeat it.
- **Learning rates**: the corpus LM's peak rate (3e-3 at the base) and the ``kk_prose`` warm
  start's (1e-3) times ``128 / w``; warm-up a twentieth of the pretraining steps.

The base rung's configs are today's ``CorpusLMConfig()`` and the ``matched`` recipe's warm start
(same hashes, so no cached model or stored row changes key). A run takes a rung by name
(``TrainConfig.rung``, ``tailtheory train --rung``): its warm start is the rung's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tailtheory.core.models import TinyLMConfig
from tailtheory.engine.start.corpus_lm import CorpusLMConfig
from tailtheory.engine.start.sft import SFTConfig

TASK, TASK_KWARGS = "kk_prose", {"n_people": 2}
"""The ``matched`` recipe's task: its warm start is the one every rung builds."""

RUNG_TASKS = {TASK: (TASK_KWARGS["n_people"], TASK_KWARGS), "kk_knights": (3, {})}
"""Task -> (people per puzzle, the task kwargs its warm start is keyed by) of the tasks whose warm
start has a size on the ladder (``TrainConfig.rung``): the ``matched`` recipe's, pretrained on the
corpus, and the ``decide`` recipe's (three people, the task's default), whose lowest-bin tokens
decide the answer, trained from a random init at every size as at the base."""


@dataclass(frozen=True)
class Rung:
    """One rung: a name, a width and a depth; everything else follows the module's rule."""

    name: str
    hidden: int
    layers: int

    @property
    def model(self) -> TinyLMConfig:
        base = CorpusLMConfig().model
        heads = self.hidden // 32
        return replace(base, hidden=self.hidden, layers=self.layers, heads=heads,
                       kv_heads=max(1, heads // 2))

    @property
    def ratio(self) -> float:
        """Non-embedding parameters over the base rung's."""
        return non_embedding_params(self.model) / non_embedding_params(CorpusLMConfig().model)

    def corpus(self, build: int = 0) -> CorpusLMConfig:
        """The corpus LM of this rung's build ``build`` (:func:`check_build`): its seed (the
        initialisation and the order of the windows) is ``build``; build 0's is the base rung's
        ``CorpusLMConfig()`` itself."""
        base = replace(CorpusLMConfig(), seed=check_build(build))
        if self.model == base.model:
            return base
        steps = round(base.steps * math.sqrt(self.ratio))
        return replace(base, model=self.model, steps=steps, warmup=steps // 20,
                       lr=base.lr * 128 / self.hidden)

    def warm(self, task: str = TASK, build: int = 0) -> SFTConfig:
        """The warm start of ``task`` (a key of :data:`RUNG_TASKS`) at this rung. Default: the
        ``matched`` recipe's ``kk_prose`` from this rung's corpus LM (the base rung's: the recipe's
        own). Another task's warm start is trained from a random init, as at the base: the
        task's own warm start with this rung's width, depth and heads (its vocabulary kept).

        ``build`` (:func:`check_build`; ``matched`` only): build ``b`` is corpus-LM seed ``b``
        and warm-start seed ``b`` (the order of the examples, the accuracy checks' samples), so
        two builds share nothing trained; build 0 is today's model of the rung."""
        if check_build(build) and task != TASK:
            raise ValueError(f"builds other than 0 exist for the {TASK!r} warm start only, "
                             f"not {task!r}")
        if build:
            return replace(self.warm(task), seed=build, pretrained=self.corpus(build))
        if task not in RUNG_TASKS:
            raise ValueError(f"no warm start of task {task!r} on the ladder; it holds "
                             f"{', '.join(RUNG_TASKS)}")
        base = SFTConfig.for_task(task, task_kwargs=dict(RUNG_TASKS[task][1]))
        shape = {"hidden": self.hidden, "layers": self.layers, "heads": self.model.heads,
                 "kv_heads": self.model.kv_heads}
        if all(getattr(base.model, k) == v for k, v in shape.items()):
            return base
        if task != TASK:
            return replace(base, model=replace(base.model, **shape), lr=base.lr * 128 / self.hidden)
        return replace(base, model=self.model, pretrained=self.corpus(),
                       lr=base.lr * 128 / self.hidden)


MAX_BUILD = 99
"""The largest build number (:func:`check_build`)."""


def check_build(build) -> int:
    """``build`` when it is a build number (an ``int`` in ``0..MAX_BUILD``), else a
    ``ValueError``: a build is a seed of the corpus LM and of the warm start, not a float or a
    name."""
    if isinstance(build, bool) or not isinstance(build, int) or not 0 <= build <= MAX_BUILD:
        raise ValueError(f"a build is an integer in 0..{MAX_BUILD}, got {build!r}")
    return build


BASE = "base"
"""The rung every run starts from unless it names another: today's ``matched`` model."""

RUNGS = (Rung(BASE, 128, 4), Rung("w192", 192, 6), Rung("w256", 256, 8),
         Rung("w384", 384, 8), Rung("w448", 448, 10))
"""The ladder, smallest first: 0.59M to 18.1M non-embedding parameters (30.5x), 1.6M to 21.8M in
all."""


def rung(name: str) -> Rung:
    """The rung called ``name`` (one of :data:`RUNGS`)."""
    for r in RUNGS:
        if r.name == name:
            return r
    raise ValueError(f"unknown rung {name!r}; the ladder: {', '.join(r.name for r in RUNGS)}")


def params(cfg: TinyLMConfig) -> int:
    """Parameters of the model ``cfg`` builds (Qwen2's q/k/v biases included)."""
    return non_embedding_params(cfg) + embedding_params(cfg)


def embedding_params(cfg: TinyLMConfig) -> int:
    """The input embedding's and the output head's parameters (one matrix when tied)."""
    return (1 if cfg.tie_embeddings else 2) * cfg.vocab_size * cfg.hidden


def non_embedding_params(cfg: TinyLMConfig) -> int:
    """Parameters outside the input embedding and the output head: per layer q and o ``w^2``
    each, k and v ``w x kv_heads x head_dim`` each, the MLP's three ``w x intermediate``, two
    norms, and Qwen2's q/k/v biases; then the final norm."""
    w, d = cfg.hidden, cfg.hidden // cfg.heads
    kv = cfg.kv_heads * d
    bias = w + 2 * kv if cfg.arch == "qwen2" else 0
    layer = 2 * w * w + 2 * w * kv + 3 * w * (cfg.intermediate or 2 * w) + 2 * w + bias
    return cfg.layers * layer + w
