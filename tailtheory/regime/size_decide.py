"""L1, L4 and L5 on the ``decide`` recipe at two sizes: does what the lowest bin's tokens do
change what LOPTI's effects look like as the model grows?

The ``matched`` recipe's lowest ``pi_old`` bin holds mostly free synonym and order choices at
every rung (its bins are fixed by its synonym weights), so its L1, L4 and L5 trends say nothing
about tokens that decide the answer. The ``decide`` recipe's do (two thirds of its warm start's
lowest bin; :mod:`tailtheory.lopti.decisive_store`). Here the same one-step probes
(:func:`tailtheory.lopti.measurement.measure`, the recipe's probe sizes: 4 GRPO batches of 32
prompts x 8 responses a seed) run on its warm start at the base rung (the recipe's own, 0.72M
parameters) and at :data:`DECIDE_RUNGS`'s larger rung (the same config with that rung's width,
depth and heads: :meth:`tailtheory.engine.start.rungs.Rung.warm`; 8x the non-embedding
parameters, built here when the cache lacks it: a few CPU minutes). Seeds are probe seeds of one
warm start at each size, as in the recipe's stored probe.

**The rule, fixed before the larger size was measured** (the ledger's): two sizes cannot carry
the ladder's trend over rung means, so the seeds are the units. Per effect, ``slope`` = (mean at
the larger size - mean at the base) / ``log10`` of their non-embedding parameter ratio, ``se``
from the two sizes' seed variances (Welch); **GROWS** / **SHRINKS** when ``|slope| > 2 se``;
**FLAT** when ``|slope| + 2 se`` is below the effect's ``delta`` per decade (the ladder's, the
same equivalence test); **UNRESOLVED** otherwise; PENDING until both sizes have 3 seeds.
"""

from __future__ import annotations

import math

import numpy as np

from tailtheory.engine.start.rungs import BASE, non_embedding_params, rung
from tailtheory.engine.start.warm_cache import load_warm_start, warm_start
from tailtheory.experiments.comparison import Z_CRIT
from tailtheory.experiments.policies import grpo_config
from tailtheory.lopti.measurement import measure, seed_effects

TASK = "kk_knights"
"""The ``decide`` recipe's task (three people, the task's default)."""

PART = "lopti_decide"
"""The part of ``results/ladder_effects.json`` that holds these probes, per rung and seed."""

DECIDE_RUNGS = (BASE, "w256")
"""The two sizes: the base rung and one with 8x its non-embedding parameters (6.9x in all with
the recipe's 512-id vocabulary)."""

MIN_SEEDS = 3


def decide_policy(name: str, progress: bool = True) -> tuple:
    """``(model, task, warm_key)``: the ``decide`` recipe's warm start at rung ``name`` (trained
    first when the cache lacks it)."""
    if name not in DECIDE_RUNGS:
        raise ValueError(f"the decide recipe is measured at {', '.join(DECIDE_RUNGS)}, not "
                         f"{name!r}")
    path = warm_start(rung(name).warm(TASK), progress=progress)
    model, task = load_warm_start(path, device="cpu")
    return model, task, path.name


def decide_numbers(model, task, seed: int, batches: int = 4, cfg=None) -> dict:
    """L1, L4 and L5's numbers of one probe seed on the ``decide`` recipe's batches (``cfg``: a
    ``TrainConfig`` for their sizes, default the recipe's)."""
    data = measure(model, task, cfg or grpo_config("decide"), (seed,), batches, progress=False,
                   min_seeds=1)
    return seed_effects(data)[seed]


def decide_sizes(data: dict, effects: dict) -> dict[str, dict]:
    """Effect -> both sizes' seed values and the two-size verdict of the module docstring, for
    the lopti effects of ``effects`` (effect -> (part, key, delta per decade)); ``data``: the
    ladder's effects store (rung -> part -> seed -> numbers)."""
    lo, hi = DECIDE_RUNGS
    decades = math.log10(non_embedding_params(rung(hi).warm(TASK).model)
                         / non_embedding_params(rung(lo).warm(TASK).model))
    out = {}
    for effect, (part, key, delta) in effects.items():
        if part != "lopti":
            continue
        vals = {n: [v[key] for v in data.get(n, {}).get(PART, {}).values()
                    if isinstance(v, dict) and math.isfinite(v.get(key, math.nan))]
                for n in DECIDE_RUNGS}
        res = {"values": vals, "delta": delta}
        if min(len(v) for v in vals.values()) < MIN_SEEDS:
            res["verdict"] = "PENDING (" + ", ".join(f"{n} {len(v)} of {MIN_SEEDS} seeds"
                                                     for n, v in vals.items()) + ")"
        else:
            slope = (np.mean(vals[hi]) - np.mean(vals[lo])) / decades
            se = math.sqrt(sum(np.var(v, ddof=1) / len(v) for v in vals.values())) / decades
            res.update(slope=float(slope), se=float(se), verdict=(
                ("GROWS" if slope > 0 else "SHRINKS") if abs(slope) > Z_CRIT * se else
                "FLAT" if abs(slope) + Z_CRIT * se < delta else "UNRESOLVED"))
        out[effect] = res
    return out


def decide_table(data: dict, effects: dict) -> str:
    """:func:`decide_sizes` as text, one line per effect."""
    lines = []
    for effect, r in decide_sizes(data, effects).items():
        cells = ", ".join(f"{n} {np.mean(v):.3g} ({len(v)})" for n, v in r["values"].items() if v)
        slope = (f"; slope {r['slope']:+.3g} per decade (se {r['se']:.2g}), delta {r['delta']:g}"
                 if "slope" in r else "")
        lines.append(f"{effect:11s} {r['verdict']}{slope}" + (f": {cells}" if cells else ""))
    return "\n".join(lines)
