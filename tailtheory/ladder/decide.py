"""L1, L4 and L5 on the ``decide`` recipe at two sizes: does what the lowest bin's tokens do
change what LOPTI's effects look like as the model grows?

The ``matched`` recipe's lowest ``pi_old`` bin holds mostly free synonym and order choices at
every rung (its bins are fixed by its synonym weights), so its L1, L4 and L5 trends say nothing
about tokens that decide the answer. The ``decide`` recipe's do (a share 0.647 [0.572, 0.721] of
its warm start's lowest bin, 295 tokens of 90 prompts; :mod:`tailtheory.lopti.decisive.store`).
Here the same one-step probes (:func:`tailtheory.lopti.measurement.measure`, the recipe's probe
sizes: 4 GRPO batches of 32 prompts x 8 responses a seed) run on its warm start at the base rung
(the recipe's own, 0.72M parameters) and at larger rungs (the same config with the rung's width,
depth and heads: :meth:`tailtheory.engine.start.rungs.Rung.warm`; built here when the cache lacks
it, minutes on a CPU: its responses are 2-4 tokens). Seeds are probe seeds of one warm start at
each size, as in the recipe's stored probe.

**The rules, fixed before any size above the base was measured** (the ledger's). At the two
sizes :data:`TWO_SIZES` the seeds are the units: per effect, ``slope`` = (mean at the larger
size - mean at the base) / ``log10`` of their non-embedding parameter ratio, ``se`` from the two
sizes' seed variances (Welch); **GROWS** / **SHRINKS** when ``|slope| > 2 se``; **FLAT** when
``|slope| + 2 se`` is below the effect's ``delta`` per decade (the ladder's, the same
equivalence test); **UNRESOLVED** otherwise; PENDING until both sizes have 3 seeds. The warm
start is cheap to build at every rung, so the part may run at any rung of the ladder
(:data:`DECIDE_RUNGS`); once at least 4 rungs have 3 seeds, the ladder's own trend over rung
means (:func:`tailtheory.ladder.trend.size_trend`, the same ``delta``) is reported beside it.
"""

from __future__ import annotations

import math

import numpy as np

from tailtheory.ladder.trend import size_trend
from tailtheory.engine.start.rungs import BASE, RUNGS, non_embedding_params, rung
from tailtheory.engine.start.warm_cache import load_warm_start, warm_start
from tailtheory.experiments.comparison import Z_CRIT
from tailtheory.experiments.policies import grpo_config
from tailtheory.lopti.measurement import measure, seed_effects, seed_values
from tailtheory.ladder.mismatch import MIN_RUNGS, MIN_SEEDS

TASK = "kk_knights"
"""The ``decide`` recipe's task (three people, the task's default)."""

PART = "lopti_decide"
"""The part of ``results/ladder_effects.json`` that holds these probes, per rung and seed."""

TWO_SIZES = (BASE, "w256")
"""The two sizes of the pre-registered verdict: the base rung and one with 8x its non-embedding
parameters (6.9x in all with the recipe's 512-id vocabulary)."""

DECIDE_RUNGS = tuple(r.name for r in RUNGS)
"""The rungs the part may measure (every rung: the warm start is built where it is missing)."""


def decide_policy(name: str, progress: bool = True) -> tuple:
    """``(model, task, warm_key)``: the ``decide`` recipe's warm start at rung ``name`` (trained
    first when the cache lacks it)."""
    path = warm_start(rung(name).warm(TASK), progress=progress)
    model, task = load_warm_start(path, device="cpu")
    return model, task, path.name


def decide_numbers(model, task, seed: int, batches: int = 4, cfg=None) -> dict:
    """L1, L4 and L5's numbers of one probe seed on the ``decide`` recipe's batches (``cfg``: a
    ``TrainConfig`` for their sizes, default the recipe's), and ``bin_fractions``: the share of
    the batches' response tokens in each LOPTI ``pi_old`` bin (the size's regime)."""
    data = measure(model, task, cfg or grpo_config("decide"), (seed,), batches, progress=False,
                   min_seeds=1)
    return {**seed_effects(data)[seed],
            "bin_fractions": [float(x) for x in seed_values(data)[seed]["frac"]]}


def _params(name: str) -> int:
    return non_embedding_params(rung(name).warm(TASK).model)


def decide_sizes(data: dict, effects: dict) -> dict[str, dict]:
    """Effect -> its seed values per measured rung (``values``), the two-size verdict of the
    module docstring (``verdict``, with ``slope`` and ``se`` once both sizes have their seeds)
    and, once 4 rungs have 3 seeds, the ladder's trend over them (``trend``: verdict, slope and
    interval), for the lopti effects of ``effects`` (effect -> (part, key, delta per decade));
    ``data``: the ladder's effects store (rung -> part -> seed -> numbers)."""
    lo, hi = TWO_SIZES
    decades = math.log10(_params(hi) / _params(lo))
    out = {}
    for effect, (part, key, delta) in effects.items():
        if part != "lopti":
            continue
        vals = {n: v for n in DECIDE_RUNGS
                if (v := [x[key] for x in data.get(n, {}).get(PART, {}).values()
                          if isinstance(x, dict) and math.isfinite(x.get(key, math.nan))])}
        res = {"values": vals, "delta": delta}
        two = [vals.get(n, []) for n in TWO_SIZES]
        if min(len(v) for v in two) < MIN_SEEDS:
            res["verdict"] = "PENDING (" + ", ".join(f"{n} {len(v)} of {MIN_SEEDS} seeds"
                                                     for n, v in zip(TWO_SIZES, two)) + ")"
        else:
            slope = (np.mean(two[1]) - np.mean(two[0])) / decades
            se = math.sqrt(sum(np.var(v, ddof=1) / len(v) for v in two)) / decades
            res.update(slope=float(slope), se=float(se), verdict=(
                ("GROWS" if slope > 0 else "SHRINKS") if abs(slope) > Z_CRIT * se else
                "FLAT" if abs(slope) + Z_CRIT * se < delta else "UNRESOLVED"))
        full = [n for n, v in vals.items() if len(v) >= MIN_SEEDS]
        if len(full) >= MIN_RUNGS:
            t = size_trend([_params(n) for n in full], [np.mean(vals[n]) for n in full], delta)
            res["trend"] = {"verdict": t.verdict, "slope": t.slope, "low": t.low, "high": t.high,
                            "rungs": full}
        out[effect] = res
    return out


def decide_table(data: dict, effects: dict) -> str:
    """:func:`decide_sizes` as text, one line per effect."""
    lines = []
    for effect, r in decide_sizes(data, effects).items():
        cells = ", ".join(f"{n} {np.mean(v):.3g} ({len(v)})" for n, v in r["values"].items())
        slope = (f"; slope {r['slope']:+.3g} per decade (se {r['se']:.2g}), delta {r['delta']:g}"
                 if "slope" in r else "")
        t = r.get("trend")
        trend = (f"; over {len(t['rungs'])} rungs {t['verdict']} ({t['low']:+.3g} to "
                 f"{t['high']:+.3g})" if t else "")
        lines.append(f"{effect:11s} {r['verdict']}{slope}{trend}" + (f": {cells}" if cells else ""))
    low = {n: [x["bin_fractions"][0] for x in data.get(n, {}).get(PART, {}).values()
               if isinstance(x, dict) and "bin_fractions" in x] for n in DECIDE_RUNGS}
    low = ", ".join(f"{n} {100 * np.mean(v):.1f}%" for n, v in low.items() if v)
    return "\n".join(lines + ([f"lowest pi_old bin's share of response tokens: {low}"]
                               if low else []))
