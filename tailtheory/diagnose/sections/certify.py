"""Certify a run's training-inference mismatch against a bar on each step's mean k3
(``tailtheory diagnose DUMP --certify [--bar K3]``).

Source: prime-rl's bar for a new model (``PrimeIntellect-ai/prime-rl`` PR 2672): the mean
mismatch KL of each of 20 steps, measured at learning rate 0 (its math environment, batch size
64), below 0.015. prime-rl's ``mismatch_kl`` is ``exp(r) - r - 1`` with ``r = trainer -
inference``: TIM's k3 (arXiv 2605.14220) of ``log rho = logp_train - logp_rollout``, prime-rl's
sign and the toolkit's (:func:`tailtheory.core.estimators.k3`). A step's quantity is the
token-mean k3 of its included tokens, the ``k3`` of the steps section's table.

The verdict (:func:`certify_verdict`), with the command's exit status:

- **fail** (1): a step's mean k3 above the bar (``--bar 0``: a token whose two log-probs differ
  as the dump stores them). More steps cannot lift a failing step, so this holds at any count.
- **pass** (0): no step fails, over at least :data:`MIN_STEPS` steps.
- **cannot decide** (2): no step fails, but fewer than :data:`MIN_STEPS` steps were read, or a
  file lacks its steps (a generic file without ``step``, a NeMo-RL file not named
  ``train_data_step{N}.jsonl``: every row would be step 0).

``--bar 0`` means bitwise equal at the precision the dump stores its log-probs in, which the
verdict names (:attr:`~tailtheory.diagnose.formats.base.Dump.precision`: ``float32 as
stored``, ``JSON-rounded decimals``, ...): a k3 of 0 cannot say it, since k3 rounds a tiny
``log rho`` to 0. A dump cannot show the learning rate: above 0, the trainer's log-probs of a
step include the policy's updates and the mismatch reads larger.

Shapes: a batch of ``n`` token rows, ``(n,)``; per step ``(S,)``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tailtheory.diagnose.sections.base import Diagnosis, Section, num, plural

NAME = "certify"

DEFAULT_BAR = 0.015
"""prime-rl's bar on each step's mean mismatch KL (k3) for a new model (PR 2672)."""
MIN_STEPS = 20
"""Fewest steps a pass needs: prime-rl's 20 (PR 2672)."""
BAR_SOURCE = ("prime-rl's bar for a new model (PR 2672): the mean mismatch KL of each of 20 "
              "steps at learning rate 0 (math environment, batch size 64) below 0.015")
"""Where the default bar comes from, printed with every verdict at that bar."""
WORST_TOKENS = 10
"""Tokens of largest ``|log rho|`` the verdict lists (step, sample, position)."""
SHOWN_STEPS = 10
"""Failing steps named in the verdict's line (all of them in ``summary.json``)."""
STATUS = {"pass": 0, "fail": 1, "undecided": 2}
"""Each verdict and the exit status of ``--certify``."""


def check_bar(bar) -> float:
    """``bar`` as a float: finite and ``>= 0`` (``ValueError`` otherwise)."""
    try:
        x = float(bar)
    except (TypeError, ValueError):
        raise ValueError(f"--bar must be a number, got {bar!r}") from None
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"--bar must be a finite number >= 0 (a mean k3), got {bar}")
    return x


class CertifySums:
    """Per step, the tokens whose two log-probs differ as stored (``log rho != 0``); over the
    run, the :data:`WORST_TOKENS` tokens of largest ``|log rho|`` (ties: the first read)."""

    def __init__(self, acc):
        self.unequal: dict[int, int] = {}
        self.worst: list[tuple] = []

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        b, lr = t.batch, t.log_rho
        step = b.step[b.ok]
        diff = lr != 0
        if diff.any():
            for s, c in zip(*np.unique(step[diff], return_counts=True)):
                self.unequal[int(s)] = self.unequal.get(int(s), 0) + int(c)
        a = np.abs(lr)
        top = np.flatnonzero(a > 0)
        if len(top) > WORST_TOKENS:
            top = top[np.argsort(-a[top], kind="stable")[:WORST_TOKENS]]
        sid, pos = b.sample_id[b.ok], b.position[b.ok]
        new = [(float(a[i]), float(lr[i]), int(step[i]), sid[i], int(pos[i]), b.file) for i in top]
        self.worst = sorted(self.worst + new, key=lambda r: -r[0])[:WORST_TOKENS]


def certify_verdict(steps, k3, unequal, bar: float, *, lacks_step=(), precision: str = "",
                    worst=(), min_steps: int = MIN_STEPS) -> dict:
    """The certification of per-step mean k3 against ``bar`` (see the module's rules).

    ``steps``, ``k3``, ``unequal``: per step, its value, its token-mean k3 and its tokens with
    ``log rho != 0`` (``(S,)`` each); ``lacks_step``: the files without steps; ``precision``:
    how the dump stores its log-probs; ``worst``: dicts of the largest ``|log rho|`` tokens.
    Returns ``verdict`` (a key of :data:`STATUS`), ``status``, ``bar``, ``bitwise`` (bar 0),
    ``min_steps``, ``steps``, ``unequal_tokens``, ``failing_steps`` (each ``step``, ``k3``,
    ``unequal_tokens``), ``max_step_k3`` and ``max_step``, ``precision``, ``reason`` (why it
    cannot decide, else ``""``) and ``worst_tokens``.
    """
    bar = check_bar(bar)
    steps, k3 = np.asarray(steps, np.int64), np.asarray(k3, np.float64)
    unequal = np.asarray(unequal, np.int64)
    bad = unequal > 0 if bar == 0 else ~(k3 <= bar)              # a NaN k3 fails too
    failing = [{"step": int(s), "k3": float(x), "unequal_tokens": int(u)}
               for s, x, u in zip(steps[bad], k3[bad], unequal[bad])]
    j = int(np.nanargmax(k3)) if len(k3) and not np.isnan(k3).all() else None
    reason = ""
    if failing:
        verdict = "fail"
    elif lacks_step:
        verdict = "undecided"
        reason = (f"no column step in {plural(len(lacks_step), 'file')} "
                  f"({', '.join(map(str, list(lacks_step)[:3]))}"
                  f"{', ...' if len(lacks_step) > 3 else ''}): every row there is step 0, so "
                  f"its steps cannot be told apart")
    elif len(steps) < min_steps:
        verdict = "undecided"
        reason = f"{plural(len(steps), 'step')} read; a pass needs at least {min_steps}"
    else:
        verdict = "pass"
    return {"verdict": verdict, "status": STATUS[verdict], "bar": bar, "bitwise": bar == 0,
            "min_steps": min_steps, "steps": len(steps), "unequal_tokens": int(unequal.sum()),
            "failing_steps": failing, "max_step_k3": None if j is None else float(k3[j]),
            "max_step": None if j is None else int(steps[j]), "precision": precision,
            "reason": reason, "worst_tokens": list(worst)}


def undecided(reason: str, bar: float) -> dict:
    """The verdict of a dump that could not be read: cannot decide, ``reason`` (the error)."""
    return {**certify_verdict([], [], [], bar), "reason": reason}


def certify_lines(c: dict) -> list[str]:
    """The verdict of :func:`certify_verdict` in words: the verdict with its exit status, the
    failing steps (at most :data:`SHOWN_STEPS`), the worst tokens, the bar and its source."""
    sign = "log rho = logp_train - logp_rollout (prime-rl's sign)"
    n, bar, prec = c["steps"], c["bar"], c["precision"] or "as stored"
    head = {"pass": "PASS", "fail": "FAIL", "undecided": "CANNOT DECIDE"}[c["verdict"]]
    head = f"{head} (exit {c['status']}): "
    top = f"; the largest is {num(c['max_step_k3'])} at step {c['max_step']}" \
        if c["max_step"] is not None else ""
    if c["verdict"] == "undecided":
        seen = f" (no step above {bar:g} so far{top})" if c["steps"] else ""
        lines = [head + c["reason"] + seen + "."]
    elif c["verdict"] == "pass" and c["bitwise"]:
        lines = [head + f"logp_train equals logp_rollout bitwise on every token of "
                        f"{plural(n, 'step')} ({prec})."]
    elif c["verdict"] == "pass":
        lines = [head + f"every step's token-mean k3 of {sign} is <= {bar:g} over "
                        f"{plural(n, 'step')}{top}."]
    else:
        f = c["failing_steps"]
        shown = ", ".join(f"step {x['step']} ("
                          + (f"{plural(x['unequal_tokens'], 'token')} differ"
                             if c["bitwise"] else num(x["k3"])) + ")"
                          for x in f[:SHOWN_STEPS])
        more = f", and {len(f) - SHOWN_STEPS} more" if len(f) > SHOWN_STEPS else ""
        what = (f"logp_train differs from logp_rollout ({prec}) on "
                f"{plural(c['unequal_tokens'], 'token')} in" if c["bitwise"] else
                f"the token-mean k3 of {sign} is above {bar:g} in")
        lines = [head + f"{what} {len(f)} of {plural(n, 'step')}: {shown}{more}."]
    if c["worst_tokens"]:
        lines.append("largest |log rho|: " + "; ".join(
            f"step {w['step']}, sample {w['sample_id']}, position {w['position']}: "
            f"{num(w['abs_log_rho'])}" for w in c["worst_tokens"][:5]) + ".")
    src = BAR_SOURCE if bar == DEFAULT_BAR else ("bitwise equality" if bar == 0 else
                                                 f"--bar {bar:g}; prime-rl's is {DEFAULT_BAR:g}")
    lines.append(f"bar: mean k3 <= {bar:g} at every step of at least {c['min_steps']} ({src}); "
                 f"a dump cannot show the learning rate: above 0 the mismatch includes the "
                 f"policy's updates.")
    return lines


def certify_section(acc, d: Diagnosis, bar: float | None) -> dict:
    """Certify the run from the steps section's table (each step's ``k3``, ``tokens``) and the
    sums of :class:`CertifySums`: ``d.summary["certify"]``, the table ``certify`` (per step:
    ``step``, ``tokens``, ``k3``, ``unequal_tokens``, ``passes``) and the verdict lines."""
    bar = DEFAULT_BAR if bar is None else check_bar(bar)
    f, t = acc.folds[NAME], d.tables["steps"]
    unequal = np.array([f.unequal.get(int(s), 0) for s in t.step], np.int64)
    precision = "; ".join(dict.fromkeys(x.precision for x in acc.dumps if x.precision))
    lacks = [str(x.path) for x in acc.dumps if "step" in x.lacks]
    worst = [{"step": s, "sample_id": sid, "position": p, "file": str(acc.files[fi]),
              "abs_log_rho": a, "log_rho": lr} for a, lr, s, sid, p, fi in f.worst]
    c = certify_verdict(t.step, t.k3, unequal, bar, lacks_step=lacks, precision=precision,
                        worst=worst)
    d.tables[NAME] = pd.DataFrame({"step": t.step, "tokens": t.tokens, "k3": t.k3,
                                   "unequal_tokens": unequal,
                                   "passes": unequal == 0 if bar == 0 else t.k3 <= bar})
    d.summary[NAME] = c
    d.verdicts[NAME] = certify_lines(c)
    return c


def _figure(d: Diagnosis, plt):
    t, c = d.tables[NAME], d.summary[NAME]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    a.plot(t.step, t.k3, "o-", ms=3, label="token-mean k3 per step")
    bad = ~t.passes.to_numpy(bool)
    a.plot(t.step[bad], t.k3[bad], "x", color="C3", ms=7, label="failing step")
    if c["bar"] > 0:
        a.axhline(c["bar"], color="C3", ls=":", lw=1, label=f"bar {c['bar']:g}")
    a.set(xlabel="step", ylabel="k3", title=f"Certification: {c['verdict']}")
    a.set_yscale("symlog", linthresh=1e-8)
    a.legend(fontsize=7)
    return fig, t


SUMMARY = {
    "certify": "the certification of each step's token-mean k3 of log rho = logp_train - "
               "logp_rollout against the bar (--bar; default 0.015, prime-rl's PR 2672): "
               "verdict (pass, fail, undecided) and status (the exit status of --certify), "
               "bar, bitwise (bar 0: equal as stored), min_steps, steps, unequal_tokens, "
               "failing_steps (step, k3, unequal_tokens), max_step_k3, max_step, precision "
               "(how the dump stores its log-probs), reason (why it cannot decide) and "
               "worst_tokens (step, sample_id, position, file, abs_log_rho, log_rho)",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Certification: each step's mean k3 against a bar",
                  "TIM's k3; prime-rl's bar (PR 2672)",
                  lambda ctx, d: certify_section(ctx.acc, d, ctx.bar), CertifySums, _figure,
                  summary=SUMMARY)
