"""Check a run resumed from a checkpoint (``tailtheory diagnose DUMP --resume-at STEP``): does
the mismatch, or the reward, jump across the resume?

Source: slime issue 1695 (high log-prob differences for a few steps after a resume); TIM's k3
(arXiv 2605.14220) of ``log rho = logp_train - logp_rollout``
(:func:`tailtheory.core.estimators.k3`), the token-mean per step of the steps section's table.

Per step, three series (:data:`SERIES`): the token-mean k3; the token-mean ``|log rho|``
(``|Delta|``), standing in for the share of tokens beyond M3's envelope, which the envelope
section does not give per step; the mean reward of the step's complete responses, where the
format carries a reward (prime-rl's exports do not).

The check (:func:`resume_check`): ``STEP`` is the first step of the resumed run. Over the
:data:`SIDE` steps before it and the :data:`SIDE` steps from it on, the change across the resume
is ``mean(after) - mean(before)``; its scale is the robust sd of the run's step-to-step changes,
``1.4826 x MAD`` of the first differences computed away from ``STEP`` (every difference except
those touching the :data:`SIDE` steps from ``STEP`` on, where a resume's effect would sit). A
series jumps when ``|change| > JUMP_SD x robust sd``. Fewer than :data:`SIDE` steps on a side,
fewer than :data:`MIN_DIFFS` differences away from the resume, or ``STEP`` not a step of the
dump: ``ValueError`` (the command's exit status 2, with one line).

Shapes: per step ``(S,)``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tailtheory.diagnose.sections.base import Diagnosis, Section, num, plural

NAME = "resume"

SIDE = 5
"""Steps compared on each side of the resume (issue 61's five)."""
JUMP_SD = 4.0
"""A change across the resume beyond this many robust sd of the step-to-step changes jumps."""
MAD_SD = 1.4826
"""Robust sd = ``MAD_SD x`` median absolute deviation: the sd of a normal sample."""
MEAN_AD_SD = 1.2533
"""Fallback when the MAD is 0 (discrete rewards): ``sqrt(pi / 2) x`` mean absolute deviation
from the median, the sd of a normal sample."""
MIN_DIFFS = 4
"""Fewest step-to-step changes away from the resume that give the scale."""
SERIES = {"k3": "token-mean k3", "abs_log_rho": "token-mean |log rho|",
          "reward": "mean reward"}
"""The series checked, by key, and their names in words."""
STATUS = {"quiet": 0, "jump": 1}
"""Each outcome and the exit status of ``--resume-at``."""


def robust_sd(x) -> float:
    """``MAD_SD x`` the median absolute deviation of ``x`` (NaN dropped); when that is 0,
    ``MEAN_AD_SD x`` the mean absolute deviation from the median. Shapes: (n,) -> scalar."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan
    dev = np.abs(x - np.median(x))
    mad = float(np.median(dev))
    return MAD_SD * mad if mad > 0 else MEAN_AD_SD * float(dev.mean())


def resume_check(steps, series: dict, at: int, *, side: int = SIDE,
                 jump_sd: float = JUMP_SD) -> dict:
    """The change of each of ``series`` (name -> per-step values, ``(S,)``, NaN where a step
    lacks it) across the resume at step ``at`` (see the module's rule). Returns ``at``, ``side``,
    ``jump_sd``, ``before`` and ``after`` (the steps compared), ``series`` (per name: ``name``,
    ``before_mean``, ``after_mean``, ``change``, ``robust_sd``, ``z``, ``jump``), ``jump`` (any
    series jumps), ``verdict`` (a key of :data:`STATUS`) and ``status``. Raises ``ValueError``
    with one line when the check cannot be made."""
    steps = np.asarray(steps, np.int64)
    order = np.argsort(steps)
    steps = steps[order]
    if at not in set(steps.tolist()):
        lo, hi = (int(steps[0]), int(steps[-1])) if len(steps) else (None, None)
        raise ValueError(f"--resume-at {at}: no step {at} in the dump (its steps run from {lo} "
                         f"to {hi}, {plural(len(steps), 'step')})")
    j = int(np.searchsorted(steps, at))
    if j < side or len(steps) - j < side:
        raise ValueError(f"--resume-at {at}: {plural(j, 'step')} before it and "
                         f"{plural(len(steps) - j, 'step')} from it on; the check needs "
                         f"{side} on each side")
    away = np.ones(len(steps) - 1, bool)                 # diff i joins steps i and i + 1
    away[max(j - 1, 0):j + side - 1] = False
    if away.sum() < MIN_DIFFS:
        raise ValueError(f"--resume-at {at}: {int(away.sum())} step-to-step changes away from "
                         f"the resume; the scale needs {MIN_DIFFS}")
    out = []
    for name, values in series.items():
        x = np.asarray(values, np.float64)[order]
        if not np.isfinite(x).any():
            continue
        b, a = x[j - side:j], x[j:j + side]
        change = float(np.nanmean(a) - np.nanmean(b)) if np.isfinite(a).any() and \
            np.isfinite(b).any() else math.nan
        sd = robust_sd(np.diff(x)[away])
        z = (change / sd if sd > 0 else 0.0 if change == 0 else math.inf) \
            if np.isfinite(change) and np.isfinite(sd) else math.nan
        out.append({"name": name, "before_mean": float(np.nanmean(b)),
                    "after_mean": float(np.nanmean(a)), "change": change, "robust_sd": sd,
                    "z": z, "jump": bool(abs(z) > jump_sd)})
    jump = any(s["jump"] for s in out)
    verdict = "jump" if jump else "quiet"
    return {"at": int(at), "side": side, "jump_sd": jump_sd,
            "before": steps[j - side:j].tolist(), "after": steps[j:j + side].tolist(),
            "series": out, "jump": jump, "verdict": verdict, "status": STATUS[verdict]}


def resume_lines(r: dict) -> list[str]:
    """The check of :func:`resume_check` in words: the verdict with its exit status, one line
    per series, what stands in for the envelope's share and the rule."""
    jumped = [s for s in r["series"] if s["jump"]]
    b, a = r["before"], r["after"]
    span = f"steps {b[0]}-{b[-1]} against {a[0]}-{a[-1]}"
    if jumped:
        lines = [f"JUMP (exit 1) across the resume at step {r['at']} ({span}): "
                 + ", ".join(SERIES[s["name"]] for s in jumped) + "."]
    else:
        lines = [f"QUIET (exit 0): no jump across the resume at step {r['at']} ({span})."]
    for s in r["series"]:
        lines.append(f"{SERIES[s['name']]}: {num(s['before_mean'])} before, "
                     f"{num(s['after_mean'])} after, a change of {num(s['change'], '+.3g')} = "
                     f"{num(s['z'], '+.3g')} robust sd of the step-to-step changes"
                     + (" (jump)" if s["jump"] else "") + ".")
    if not any(s["name"] == "reward" for s in r["series"]):
        lines.append("no reward in the dump: the reward is not checked.")
    lines.append(f"rule: a jump is a change of the mean over {r['side']} steps beyond "
                 f"{r['jump_sd']:g} robust sd (1.4826 x MAD of the first differences away from "
                 f"the resume); mean |log rho| stands in for the share of tokens beyond M3's "
                 f"envelope, which the envelope section does not give per step.")
    return lines


def resume_section(ctx, d: Diagnosis) -> None:
    """With ``ctx.resume_at``: the check from the steps section's table (``k3``,
    ``abs_delta_mean``) and the complete responses' rewards; ``d.summary["resume"]``, the table
    ``resume`` (per step: ``step``, ``k3``, ``abs_log_rho``, ``reward``, ``side``) and the
    verdict lines. Without it, ``d.summary["resume"]`` is ``None`` and nothing else is written
    (the console stays as it was)."""
    if ctx.resume_at is None:
        d.summary[NAME] = None
        return
    t, s = d.tables["steps"], ctx.complete
    reward = np.full(len(t), math.nan)
    fin = np.isfinite(s["reward"])
    for i, step in enumerate(t.step):
        here = fin & (s["step"] == step)
        if here.any():
            reward[i] = float(s["reward"][here].mean())
    series = {"k3": t.k3.to_numpy(), "abs_log_rho": t.abs_delta_mean.to_numpy(),
              "reward": reward}
    r = resume_check(t.step.to_numpy(), series, int(ctx.resume_at))
    side = np.where(np.isin(t.step, r["before"]), "before",
                    np.where(np.isin(t.step, r["after"]), "after", ""))
    d.tables[NAME] = pd.DataFrame({"step": t.step, **series, "side": side})
    d.summary[NAME] = r
    d.verdicts[NAME] = resume_lines(r)


def _figure(d: Diagnosis, plt):
    t, r = d.tables[NAME], d.summary[NAME]
    cols = [c for c in ("k3", "abs_log_rho", "reward") if np.isfinite(t[c]).any()]
    fig, axes = plt.subplots(len(cols), 1, figsize=(6.4, 1.8 * len(cols) + 0.8), sharex=True)
    for a, c in zip(np.atleast_1d(axes), cols):
        a.plot(t.step, t[c], "o-", ms=3)
        a.axvline(r["at"] - 0.5, color="C3", ls=":", lw=1)
        a.set_ylabel(c)
    np.atleast_1d(axes)[-1].set_xlabel("step")
    np.atleast_1d(axes)[0].set_title(f"Resume at step {r['at']}: {r['verdict']}")
    return fig, t


SUMMARY = {
    "resume": "with --resume-at: the change across the resume of each step series (k3, "
              "abs_log_rho standing in for the envelope's share, reward where the dump has it) "
              "over side steps each side, against jump_sd robust sd of the step-to-step "
              "changes: at, side, jump_sd, before and after (steps), series (name, "
              "before_mean, after_mean, change, robust_sd, z, jump), jump, verdict (quiet, "
              "jump) and status (the exit status of --resume-at); null without it",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Resume: the mismatch and reward across a resume",
                  "TIM's k3; slime issue 1695", resume_section, figure=_figure,
                  summary=SUMMARY)
