"""The search for a recipe where low-probability tokens decide the answer *and* GRPO learns: the
designs, listed in order before any run, their tuning runs and the rule that picks one.

Source: LOPTI (Yang et al., arXiv 2505.12929) trains on Knights and Knaves where its
low-probability tokens carry the answer; the ``decide`` recipe has such tokens but its GRPO gains
+0.06 to +0.10 held out in 200 steps (``decide_curve``), below the learning rule's 0.15, so its
training claims (L2, L3, L6) and the opposite claims (L7-L9) cannot be judged there.

**The designs** (:data:`DESIGNS`, in the order they are judged; each a difference from the
``decide`` recipe's :class:`~tailtheory.engine.config.TrainConfig`: ``kk_knights``, three people,
32 prompts x 8 responses, lr 1e-4, 200 steps, held-out accuracy on 256 problems every 10 steps):

1. ``g16``: 16 responses a prompt (512 a step): a group's advantage estimates twice as many
   samples, so a rare correct answer among wrong ones is seen and raised more often.
2. ``people2``: two people a puzzle (its own supervised warm start): four possible assignments,
   a task the 0.72M-parameter model can answer without a written search.
3. ``w192``: the warm start of the ``w192`` rung's architecture (hidden 192, 6 layers, about 3x
   the base's non-embedding parameters) on the same task, built here from a random init.
4. ``w192_g16``: ``w192`` with 16 responses a prompt.
5. ``people2_g16``: ``people2`` with 16 responses a prompt.
6. ``w192_400``: ``w192`` for 400 steps.

**The rule** (fixed before any run): a design *learns* on a seed when its held-out gain (mean of
the last two evaluations minus step 0) is at least :data:`~tailtheory.experiments.learning.MATCHED_GAIN`
(0.15), its reward rises (mean of the last 20 steps above the first 20's) and its format share
does not fall: the share of responses in the answer format over the last 20 steps is at least
the first 20 steps' less twice the binomial standard error of their difference
(:func:`format_holds`). The chosen design is the first in order that learns on both
:data:`TUNING_SEEDS` (:func:`chosen`) and then passes the decisiveness gate (measured apart:
``pi_old <= 0.25`` holds at least 9.6% of sampled tokens at its warm start and half-way, and the
lower 95% bound of its excess mean ``D`` is at least 3x ``matched``'s). Its warm start is
committed before its :data:`FRESH_SEEDS` run; if they miss the rule, nothing is re-tuned and no
training verdict is claimed: :func:`design_table` is the frontier shown.

The tuning runs are the study ``decide_designs`` (``tailtheory study decide_designs``, stored run
by run in ``results/decide_designs.json``), cheapest questions first: a design's two seeds train
before the next design's.

Claims: L2, L3, L6, L7, L8, L9 (where they can be judged with decisive low-probability tokens).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

import numpy as np

from tailtheory.engine.config import TrainConfig
from tailtheory.experiments import learning
from tailtheory.experiments.presets import train_config
from tailtheory.experiments.study import Arm, Study, register_study

RECIPE = "decide"
"""The recipe every design differs from."""


@dataclass(frozen=True)
class Design:
    """One design: its name, its config's difference from :data:`RECIPE` and why it is tried."""

    name: str
    changes: dict
    why: str


DESIGNS = (
    Design("g16", {"group_size": 16}, "16 responses a prompt"),
    Design("people2", {"n_people": 2}, "two people a puzzle, its own warm start"),
    Design("w192", {"rung": "w192"}, "the w192 rung's architecture, its own warm start"),
    Design("w192_g16", {"rung": "w192", "group_size": 16}, "w192 with 16 responses a prompt"),
    Design("people2_g16", {"n_people": 2, "group_size": 16},
           "two people with 16 responses a prompt"),
    Design("w192_400", {"rung": "w192", "steps": 400}, "w192 for 400 steps"),
)
"""The designs in the order they are judged (module docstring)."""

TUNING_SEEDS = (21, 22)
"""The seeds a design is tuned on (no stored run of the ``decide`` recipe used them)."""

FRESH_SEEDS = (1, 2, 3, 4, 5)
"""The chosen design's seeds after tuning, trained once its warm start is committed."""

WINDOW = learning.WINDOW
"""Steps averaged at each end of the reward and format curves."""

SERIES = {"format": "reward/format"}
"""The per-step series the study keeps beside reward and held-out accuracy."""


def design(name: str) -> Design:
    """The design named ``name``; a ``ValueError`` listing the valid names otherwise."""
    for d in DESIGNS:
        if d.name == name:
            return d
    raise ValueError(f"unknown design {name!r}; valid: {', '.join(d.name for d in DESIGNS)}")


def design_config(name: str, seed: int) -> TrainConfig:
    """The GRPO run of design ``name`` at ``seed``: the recipe's config with the design's changes
    (the recipe's fixed task and people are the design's to change here)."""
    return replace(train_config(RECIPE), **design(name).changes, method="grpo", seed=seed)


def design_arms(preset: str) -> list[Arm]:
    """One arm a design (label = its name), seeds :data:`TUNING_SEEDS`, tagged ``design``; the
    ``decide`` preset only (the designs are differences from that recipe)."""
    if preset != RECIPE:
        raise ValueError(f"the design search runs on the {RECIPE!r} preset, not {preset!r}")
    return [Arm(d.name, tuple(design_config(d.name, s) for s in TUNING_SEEDS),
                {"design": d.name}) for d in DESIGNS]


STUDY = register_study(Study("decide_designs", design_arms, series=SERIES,
                             measure_preset=RECIPE))
"""The tuning runs of every design (``results/decide_designs.json``)."""


def format_holds(row: dict, window: int = WINDOW) -> tuple[bool, float, float]:
    """``(holds, first, last)``: whether the run's format share over its last ``window`` steps is
    at least its first ``window`` steps' less twice the binomial standard error of the
    difference, each step's share taken over ``prompts x group`` responses (``row["responses"]``
    a step)."""
    fmt, n = row["format"], row["responses"] * window
    if len(fmt) < 2 * window:
        raise ValueError(f"seed {row['seed']}: needs >= {2 * window} steps of format share "
                         f"(has {len(fmt)})")
    first, last = statistics.fmean(fmt[:window]), statistics.fmean(fmt[-window:])
    se = math.sqrt(first * (1 - first) / n + last * (1 - last) / n)
    return last >= first - 2 * se, first, last


def seed_summary(row: dict) -> dict:
    """One tuning run's numbers: :func:`~tailtheory.experiments.learning.summarize`'s, its
    format shares at both ends and whether it learns by the rule (module docstring)."""
    s = learning.summarize(row)
    holds, first, last = format_holds(row)
    s.update(format_first=first, format_last=last, format_holds=holds,
             learns=bool(s["gain"] >= learning.MATCHED_GAIN
                         and s["reward_last"] > s["reward_first"] and holds))
    return s


def design_table(data) -> list[dict]:
    """Per design (in order) and stored tuning seed: :func:`seed_summary` with the design's name;
    a design whose runs are not all stored lists the seeds it has."""
    m = STUDY.measurement(data)
    rows = []
    for d in DESIGNS:
        for r in (m[d.name] if d.name in list(m) else []):
            cfg = design_config(d.name, r["seed"])
            rows.append({"design": d.name, **seed_summary(
                {**r, "responses": cfg.prompts_per_step * cfg.group_size})})
    return rows


def chosen(table: list[dict], failed: tuple = ()) -> tuple[str | None, str]:
    """``(design, reason)``: the first design in order that learns on both tuning seeds and is
    not in ``failed`` (the designs that failed the decisiveness gate,
    :mod:`tailtheory.lopti.decisive.gate`), judged only once every earlier design has both seeds
    stored; ``None`` with the reason otherwise."""
    for d in DESIGNS:
        mine = {r["seed"]: r for r in table if r["design"] == d.name}
        if set(mine) != set(TUNING_SEEDS):
            return None, f"design {d.name} has seeds {sorted(mine)} of {list(TUNING_SEEDS)}"
        if all(r["learns"] for r in mine.values()) and d.name not in failed:
            gains = ", ".join(f"{mine[s]['gain']:+.3f}" for s in TUNING_SEEDS)
            return d.name, f"{d.name} learns on seeds {list(TUNING_SEEDS)} (gains {gains})"
    return None, ("no design learns on both tuning seeds and passes the gate: the frontier is "
                  "the table")


def plot_designs(table: list[dict]):
    """Each design's held-out gain per tuning seed (``table``: :func:`design_table`), the
    rule's 0.15 dotted, a seed that learns by the whole rule filled. Returns ``(figure,
    table)``."""
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(table)
    fig, ax = plt.subplots(figsize=(7, 3.4))
    names = [d.name for d in DESIGNS if d.name in set(df["design"])] if len(df) else []
    for k, seed in enumerate(TUNING_SEEDS):
        for j, name in enumerate(names):
            row = df[(df["seed"] == seed) & (df["design"] == name)]
            if len(row):
                ax.bar(j + (k - 0.5) * 0.35, row["gain"].iloc[0], 0.35, color=f"C{k}",
                       alpha=1.0 if row["learns"].iloc[0] else 0.35,
                       label=f"seed {seed}" if j == 0 else None)
    ax.axhline(learning.MATCHED_GAIN, ls=":", color="0.4")
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylabel("held-out gain (last 2 evaluations - step 0)")
    ax.set_title("each design's tuning seeds; filled: learns by the whole rule", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, df
