"""k1, k3 and |Delta| per step: TIM's monitors (V2; V5: they can stay flat while reward falls).

Source: TIM (arXiv 2605.14220; k1, k3), the per-step means the engine logs as
``mismatch/k1`` and ``mismatch/k3``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tailtheory.diagnose.aggregate import STEP_FIELDS, Accumulator
from tailtheory.diagnose.sections.base import STEP_GROWTH, Diagnosis, Section, num


NAME = "steps"


class StepSums:
    """Per step: tokens, sums of k1, k3 and |Delta|, max |Delta| (:data:`STEP_FIELDS`)."""

    def __init__(self, acc):
        self.steps: dict[int, np.ndarray] = {}

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        uniq, inv = np.unique(t.batch.step[t.batch.ok], return_inverse=True)
        sums = [np.bincount(inv), np.bincount(inv, weights=t.Delta),
                np.bincount(inv, weights=t.kk3), np.bincount(inv, weights=t.a)]
        mx = np.zeros(len(uniq))
        np.maximum.at(mx, inv, t.a)
        for j, st in enumerate(uniq.tolist()):
            row = self.steps.setdefault(st, np.zeros(len(STEP_FIELDS)))
            row[:4] += [x[j] for x in sums]
            row[4] = max(row[4], mx[j])


def steps(acc: Accumulator, d: Diagnosis) -> None:
    """k1, k3 and |Delta| per step (TIM's monitors; V5: they can stay flat while reward falls)."""
    keys = sorted(acc.folds[NAME].steps)
    arr = np.array([acc.folds[NAME].steps[k] for k in keys]).reshape(len(keys), len(STEP_FIELDS))
    n = arr[:, 0]
    d.tables["steps"] = pd.DataFrame({"step": keys, "tokens": n.astype(int),
                                      "k1": arr[:, 1] / n, "k3": arr[:, 2] / n,
                                      "abs_delta_mean": arr[:, 3] / n, "abs_delta_max": arr[:, 4]})
    d.summary["steps"] = len(keys)
    if len(keys) < 3:
        d.verdicts["steps"] = [f"{len(keys)} step(s): no trend to read (need 3)."]
        return
    k3 = d.tables["steps"]["k3"].to_numpy()
    third = len(k3) // 3
    first, last = k3[:third].mean(), k3[-third:].mean()
    growth = last / first if first > 0 else math.nan
    trend = ("the mismatch grows over training" if growth >= STEP_GROWTH else
             "the mismatch shrinks over training" if growth <= 1 / STEP_GROWTH else
             f"no trend beyond {STEP_GROWTH:g}x")
    d.verdicts["steps"] = [f"mean k3 {num(first)} over the first third of {len(keys)} steps, "
                           f"{num(last)} over the last ({num(growth, '.2g')}x): {trend}."]


def _figure(d: Diagnosis, plt):
    t = d.tables["steps"]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    for col in ("k1", "k3", "abs_delta_mean"):
        a.plot(t.step, t[col], "o-", ms=3, label=col)
    a.set(xlabel="step", yscale="symlog", title="Mismatch monitors over steps")
    a.set_yscale("symlog", linthresh=1e-8)
    a.legend(fontsize=7)
    return fig, t


SUMMARY = {
    "steps": "distinct values of step",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "k1 and k3 over steps", "TIM's monitors (V2, V5)",
                  lambda ctx, d: steps(ctx.acc, d), StepSums, _figure, summary=SUMMARY)
