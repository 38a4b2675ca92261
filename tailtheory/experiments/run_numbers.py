"""A training run read into the numbers a study keeps: its summary, its curves, its token dump.

Windows: a run's *final* reward is the mean ``reward/mean`` of its last :data:`FINAL_WINDOW`
steps (its *first* reward, of its first as many), its final held-out accuracy the mean of its
last :data:`FINAL_EVALS` evaluations.
"""

from __future__ import annotations
from tailtheory.engine.checkpoint import read_metrics

FINAL_WINDOW = 10
"""Steps averaged into a run's first and final reward (and any first / final window)."""

FINAL_EVALS = 2
"""Held-out evaluations averaged into a run's final accuracy."""


# ---- a run read into numbers ------------------------------------------------------------------

def read_lines(run, steps: int) -> list[dict]:
    """The first ``steps`` metric lines of a run; fewer is a ``ValueError``."""
    lines = read_metrics(run)[:steps]
    if len(lines) < steps:
        raise ValueError(f"{run} has {len(lines)} of {steps} steps")
    return lines


def run_summary(run, steps: int) -> dict:
    """A run's numbers: final and first-window reward, final and first held-out accuracy, mean
    response length, final entropy (windows of :data:`FINAL_WINDOW` steps, :data:`FINAL_EVALS`
    evaluations)."""
    lines = read_lines(run, steps)
    tail = lines[-FINAL_WINDOW:]
    evals = [m["eval/accuracy"] for m in lines if m.get("eval/accuracy") is not None]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"final_reward": mean([m["reward/mean"] for m in tail]),
            "first_reward": mean([m["reward/mean"] for m in lines[:FINAL_WINDOW]]),
            "final_eval": mean(evals[-FINAL_EVALS:]) if evals else float("nan"),
            "first_eval": evals[0] if evals else float("nan"),
            "len_mean": mean([m["rollout/len_mean"] for m in lines]),
            "entropy_final": mean([m["policy/entropy"] for m in tail])}


def run_curves(run, steps: int) -> dict:
    """A run's per-step ``reward`` and its held-out evaluations ``eval_steps`` / ``eval``."""
    lines = read_lines(run, steps)
    evals = [(m["step"], m["eval/accuracy"]) for m in lines if m.get("eval/accuracy") is not None]
    return {"reward": [m["reward/mean"] for m in lines], "eval_steps": [s for s, _ in evals],
            "eval": [a for _, a in evals]}


def window_means(rows: list, key: str, window: int = FINAL_WINDOW) -> tuple[float, float]:
    """``(first, last)``: over the runs ``rows`` (one per seed), the mean of each run's mean of
    series ``key`` over its first / last ``window`` steps; an empty ``rows`` is a ``ValueError``."""
    if not rows:
        raise ValueError(f"no runs to average {key!r} over")
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return (mean([mean(r[key][:window]) for r in rows]),
            mean([mean(r[key][-window:]) for r in rows]))


def read_tokens(run, steps: int):
    """The token dump of a run's first ``steps`` steps as one table (``dump_tokens``)."""
    from pathlib import Path

    import pandas as pd

    files = [Path(run) / "tokens" / f"step_{s:06d}.parquet" for s in range(steps)]
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"{run} has no token dump for {len(missing)} steps "
                                f"({missing[0]}, ...): run it with dump_tokens=True")
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
