"""Presets of the training notebooks: ``quick`` (a CPU, minutes, run by ``make test``) and
``full`` (the evidence: the task's real warm start, more steps and seeds).

The ``quick`` warm start is a pipeline check, not evidence: a fixed number of supervised steps,
kept whatever its accuracy (``stop_in_window=False``). It has learnt part
of the trace format and little else; figures made from it exercise the code and say nothing about
the claims. ``full`` uses the task's own warm start (:meth:`SFTConfig.for_task`), the one
``tailtheory train --model warm`` uses.
"""

from __future__ import annotations

from pathlib import Path

from tailtheory.engine.sft import SFTConfig, warm_start

PRESETS = ("quick", "full")
"""The notebooks' presets."""

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
    """The warm start of ``preset``: the task's own (``full``) or a short one (``quick``)."""
    if check_preset(preset) == "full":
        return SFTConfig.for_task(task)
    return SFTConfig.for_task(task, max_steps=QUICK_SFT_STEPS, eval_every=QUICK_SFT_STEPS,
                              eval_n=64, stop_in_window=False)


def warm_model(preset: str, task: str = TRACE_TASK, progress: bool = True) -> Path:
    """The cached warm-start folder of ``preset`` (trained first when missing); pass it as
    ``TrainConfig(model=str(path))`` or load it with ``load_warm_start``."""
    return warm_start(warm_sft_config(preset, task), progress=progress)
