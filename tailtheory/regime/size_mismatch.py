"""The two mismatch questions beyond the seeds, along the model-size ladder: V7 (does fp16
remove the mismatch bf16 rollouts create? Qi et al., arXiv 2510.26788) and V8 (does a model's
own batch-shape mismatch fall or grow with size?), read from their stored per-rung measurements
(``results/precision_ladder.json``: :mod:`tailtheory.tim.precision`;
``results/batch_shape_ladder.json``: :mod:`tailtheory.mismatch.batch_shape`) with the ledger's
criteria. Nothing here measures; :mod:`tailtheory.regime.size` prints both after the effects'
trends.
"""

from __future__ import annotations

import json

from tailtheory.core.measurements import measurement_path
from tailtheory.core.trend import size_trend
from tailtheory.engine.start.rungs import RUNGS

MIN_RUNGS, MIN_SEEDS = 4, 3
"""Rungs a verdict over the ladder needs, and seeds a rung needs to count in an effect's trend
(the ledger's rule, for every trend of :mod:`tailtheory.regime.size` and
:mod:`tailtheory.regime.size_decide`)."""


V8_DELTA = 0.005
"""V8's ``delta`` per decade: the share of ``hf`` bf16 batch-32 tokens with ``|Delta| > 1e-3``."""

V7_RANGE = (32.0, 128.0)
"""V7: the bf16 / fp16 k3 ratio's interval must lie inside this range (64 predicted)."""


def stored_data(store: str) -> dict:
    """The ``data`` of stored measurement ``store`` (``{}`` when it is missing or unreadable)."""
    try:
        data = json.loads(measurement_path(store).read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def v8_trend() -> dict:
    """V8 against size: each measured rung's ``hf`` bf16 batch-32 share of tokens with
    ``|Delta| > 1e-3`` (``results/batch_shape_ladder.json``) and its trend over at least
    :data:`MIN_RUNGS` rungs (one deterministic measurement a rung: the rungs are the units)."""
    data, rows = stored_data("batch_shape_ladder"), []
    for r in RUNGS:
        hit = [x for x in data.get(r.name, []) if isinstance(x, dict) and
               (x.get("decoder"), x.get("dtype"), x.get("batch")) == ("hf", "bf16", 32)]
        if hit:
            rows.append({"rung": r.name, "params": hit[0]["non_embedding_params"],
                         "value": float(hit[0]["over_1e3"])})
    out = {"delta": V8_DELTA, "rungs": rows}
    if len(rows) >= MIN_RUNGS:
        t = size_trend([x["params"] for x in rows], [x["value"] for x in rows], V8_DELTA)
        return {**out, "verdict": t.verdict, "slope": t.slope, "low": t.low, "high": t.high}
    return {**out, "verdict": f"PENDING ({len(rows)} of {MIN_RUNGS} rungs measured)"}


def v7_verdict() -> dict:
    """V7's one-step verdict (ledger): per rung HOLDS when the ratio's interval lies inside
    :data:`V7_RANGE` in both settings, REFUTED when one lies outside it entirely; the claim over
    at least :data:`MIN_RUNGS` rungs: HOLDS at every one, REFUTED at any, else NOT-REPRODUCED."""
    data, rows = stored_data("precision_ladder"), []
    lo, hi = V7_RANGE
    for r in RUNGS:
        settings = data.get(r.name, {}).get("settings") if isinstance(data.get(r.name), dict) \
            else None
        if not settings:
            continue
        ivs = {k: (v["ratio"], v["low"], v["high"]) for k, v in settings.items()}
        inside = all(lo <= a and b <= hi for _, a, b in ivs.values())
        outside = any(b < lo or a > hi for _, a, b in ivs.values())
        rows.append({"rung": r.name, "intervals": ivs,
                     "verdict": "HOLDS" if inside else "REFUTED" if outside else "NOT-REPRODUCED"})
    if len(rows) < MIN_RUNGS:
        return {"rungs": rows, "verdict": f"PENDING ({len(rows)} of {MIN_RUNGS} rungs measured)"}
    verdicts = {x["verdict"] for x in rows}
    return {"rungs": rows, "verdict": "REFUTED" if "REFUTED" in verdicts else
            "HOLDS" if verdicts == {"HOLDS"} else "NOT-REPRODUCED"}
