"""Does GRPO learn here? The ``learn`` recipe's GRPO runs as a study, and its criterion.

The criterion, fixed before the seeds were run: for every seed of :data:`SEEDS`,

- **held-out gain** = mean of the run's last two held-out evaluations (256 problems each, after
  100 and 110 of its 120 updates) minus the evaluation at step 0 (the warm start) >= 0.20, and
- **rising reward**: mean reward of the last 20 steps > mean reward of the first 20 steps.

``LEARNS`` when every seed meets both, else ``DOES-NOT-LEARN`` naming the seeds that missed.
Seeds 1-5 (the recipe was tuned on seed 0; seed 11 is the fresh-clone check). The runs are the
study :data:`STUDY` (``learn_curve``), stored run by run in ``results/learn_curve.json`` like
every study (``tailtheory study learn_curve`` trains the missing ones); they are the very runs of
the LOPTI study's GRPO arm and of the dose study's ``exact`` arm (same configs, same run keys).

The ``matched`` recipe (the papers' regime) has its own study, :data:`MATCHED_STUDY`
(``matched_curve``), and its criterion, fixed before its seeds ran (recorded in the ledger): the
same held-out gain, at least :data:`MATCHED_GAIN` = 0.15, in every seed of :data:`MATCHED_SEEDS`
(1-3), with a rising reward (the recipe was tuned on seed 0).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from tailtheory.experiments.presets import SEEDS as PRESET_SEEDS, train_config
from tailtheory.experiments.study import Arm, Study, register_study

GAIN = 0.20
"""The least held-out gain every seed must show."""

SEEDS = PRESET_SEEDS["learn"]
"""Seeds of the stored learning curve, the ``learn`` preset's (the recipe was tuned on seed 0)."""

MATCHED_GAIN = 0.15
MATCHED_SEEDS = (1, 2, 3)
"""The ``matched`` recipe's criterion: its least held-out gain, in every one of these seeds."""

DECIDE_SEEDS = (1, 2, 3)
"""The ``decide`` recipe's seeds for the same criterion (gain :data:`MATCHED_GAIN`; the recipe
was chosen on seed 0)."""

WINDOW = 20
"""Steps averaged at each end of the reward curve."""


def learn_arms(preset: str) -> list[Arm]:
    """GRPO on ``preset`` (``learn``: the recipe, seeds :data:`SEEDS`), tagged ``method``."""
    base = train_config(preset)
    seeds = {"learn": SEEDS, "matched": MATCHED_SEEDS, "decide": DECIDE_SEEDS}.get(
        preset, PRESET_SEEDS[preset])
    return [Arm("GRPO", tuple(replace(base, method="grpo", seed=s) for s in seeds),
                {"method": "grpo"})]


STUDY = register_study(Study("learn_curve", learn_arms))
"""The learning curve: per run its summary, reward and held-out curves, CPU time."""

MATCHED_STUDY = register_study(Study("matched_curve", learn_arms, measure_preset="matched"))
"""The ``matched`` recipe's learning curve (seeds :data:`MATCHED_SEEDS`)."""

DECIDE_STUDY = register_study(Study("decide_curve", learn_arms, measure_preset="decide"))
"""The ``decide`` recipe's learning curve (seeds :data:`DECIDE_SEEDS`)."""


def summarize(row: dict) -> dict:
    """One stored run's numbers: warm-start and final held-out accuracy, gain, reward at both
    ends of its curve (windows of :data:`WINDOW` steps) and its CPU minutes (when recorded)."""
    evals, reward = row["eval"], row["reward"]
    if len(reward) < 2 * WINDOW or len(evals) < 3 or row["eval_steps"][0] != 0:
        raise ValueError(f"seed {row['seed']}: needs >= {2 * WINDOW} steps and held-out "
                         f"evaluations from step 0 (has {len(reward)} steps, {len(evals)} "
                         f"evaluations)")
    warm, final = evals[0], statistics.fmean(evals[-2:])
    return {"seed": row["seed"], "warm": warm, "final": final, "gain": final - warm,
            "reward_first": statistics.fmean(reward[:WINDOW]),
            "reward_last": statistics.fmean(reward[-WINDOW:]),
            "cpu_minutes": row["cpu_seconds"] / 60 if "cpu_seconds" in row else float("nan")}


def verdict(rows: list[dict], gain: float = GAIN) -> tuple[str, str]:
    """``(verdict, reason)`` of the criterion in the module docstring over :func:`summarize`
    rows; ``gain``: the least held-out gain (:data:`MATCHED_GAIN` for the ``matched`` recipe)."""
    if not rows:
        raise ValueError("no runs to judge")
    missed = [r["seed"] for r in rows
              if not (r["gain"] >= gain and r["reward_last"] > r["reward_first"])]
    gains = ", ".join(f"{r['gain']:+.3f}" for r in rows)
    if missed:
        return "DOES-NOT-LEARN", f"seeds {missed} missed (gains {gains})"
    return "LEARNS", f"every seed gained >= {gain} held out (gains {gains}) with a rising reward"


def learn_table(data) -> "pd.DataFrame":
    """:func:`summarize` of every stored run of :data:`STUDY` (``data``: its measurement), one
    row per seed."""
    import pandas as pd

    m = STUDY.measurement(data)
    return pd.DataFrame([summarize(r) for r in m[m.label(method="grpo")]])
