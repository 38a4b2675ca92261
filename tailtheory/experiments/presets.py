"""Presets of the training notebooks: ``quick`` (a CPU, minutes, run by ``make test``),
``full`` (the evidence of the no-learning regime: the task's real warm start, more steps and
seeds) and ``learn`` (the learning testbed, recipe ``learn`` of :mod:`tailtheory.experiments.recipes`:
where GRPO gains >= 0.2 held-out accuracy in every seed; five seeds) and ``matched`` (recipe
``matched``: the learning testbed written in words by a pretrained BPE LM, matching the papers'
Fig. 1(a) histogram).

The ``quick`` warm start is a pipeline check, not evidence: a fixed number of supervised steps,
kept whatever its accuracy (``stop_in_window=False``). It has learnt part
of the trace format and little else; figures made from it exercise the code and say nothing about
the claims. ``full`` uses the task's own warm start (:meth:`SFTConfig.for_task`), the one
``tailtheory train --model warm`` uses.
"""

from __future__ import annotations

from pathlib import Path

from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rollout.engine import HF
from tailtheory.engine.start.sft import SFTConfig
from tailtheory.engine.start.warm_cache import warm_start

PRESETS = ("quick", "full", "learn", "matched", "decide")
"""The notebooks' presets."""

RECIPE_PRESETS = ("learn", "matched", "decide")
"""Presets that are the recipes of the same name (:mod:`tailtheory.experiments.recipes`)."""

TRACE_TASK = "kk_trace"
"""The long-response task of the training notebooks: Knights and Knaves with a worked search
(median sampled response about 100 tokens, some longer than 128)."""

QUICK_SFT_STEPS = 120
"""Supervised steps of the ``quick`` warm start (about a minute on a 2-core CPU)."""


def check_preset(preset: str) -> str:
    """``preset`` if it is one of :data:`PRESETS`; else a ``ValueError`` listing them."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    return preset


def warm_sft_config(preset: str, task: str = TRACE_TASK) -> SFTConfig:
    """The warm start of ``preset``: the task's own (``full``), a recipe's (``learn`` and
    ``matched``: :func:`~tailtheory.engine.load.warm_config` of the recipe; ``task`` does not
    apply) or a short one (``quick``)."""
    if check_preset(preset) == "full":
        return SFTConfig.for_task(task)
    if preset in RECIPE_PRESETS:
        from tailtheory.experiments.recipes import recipe_config
        from tailtheory.engine.load import warm_config

        return warm_config(recipe_config(preset))
    return SFTConfig.for_task(task, max_steps=QUICK_SFT_STEPS, eval_every=QUICK_SFT_STEPS,
                              eval_n=64, stop_in_window=False)


def warm_model(preset: str, task: str = TRACE_TASK, progress: bool = True) -> Path:
    """The cached warm-start folder of ``preset`` (trained first when missing); pass it as
    ``TrainConfig(model=str(path))`` or load it with ``load_warm_start``."""
    return warm_start(warm_sft_config(preset, task), progress=progress)


TRAIN_SIZES = {
    "quick": {"steps": 4, "prompts_per_step": 2, "group_size": 4, "eval_every": 2, "eval_n": 8,
              "max_new_tokens": 64},
    "full": {"steps": 40, "prompts_per_step": 4, "group_size": 8, "eval_every": 10,
             "eval_n": 64},
}
"""Run sizes of the training notebooks. ``full`` is sized for this 2-core CPU (about 3 s a step
for 32 responses of ~100 tokens): 40 steps of 4 prompts x 8 responses. On a GPU, raise
``steps`` and ``prompts_per_step`` (the run cache keys on them, so nothing stale is reused)."""

TRAIN_LR = 2e-4
"""RL learning rate of the training notebooks: 2x the engine default, so that 40 steps move a
warm start that a 1e-4 run moved visibly only after ~150 steps (kk, measured)."""

EVIDENCE_BACKEND = HF
"""Rollout decoder of the notebooks' runs: the stored evidence (no-learning regime) was sampled
with the Hugging Face forward; it stays so until the claims are re-measured on the ``learn``
recipe (which samples with the ``fast`` engine)."""

SEEDS = {"quick": (0, 1), "full": (0, 1, 2), "learn": (1, 2, 3, 4, 5),
         "matched": (1, 2, 3, 4, 5), "decide": (1, 2, 3, 4, 5)}
"""Seeds per configuration: training claims are read off the spread over these."""


def train_config(preset: str, **overrides):
    """The :class:`~tailtheory.engine.config.TrainConfig` of a training notebook's runs on
    :data:`TRACE_TASK` from the preset's warm start (``overrides``: method, rollout, ...);
    ``learn`` and ``matched``: the recipe's config (its task and people fixed)."""
    if check_preset(preset) in RECIPE_PRESETS:
        from tailtheory.experiments.recipes import recipe_config

        return recipe_config(preset, **overrides)
    model = "warm" if preset == "full" else str(warm_model("quick", progress=False))
    return TrainConfig(**{"task": TRACE_TASK, "model": model, "lr": TRAIN_LR,
                          "rollout_backend": EVIDENCE_BACKEND, **TRAIN_SIZES[preset],
                          **overrides})
