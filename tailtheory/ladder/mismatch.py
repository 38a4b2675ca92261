"""The two mismatch questions beyond the seeds, along the model-size ladder: V7 (does fp16
remove the mismatch bf16 rollouts create? Qi et al., arXiv 2510.26788) and V8 (does a model's
own batch-shape mismatch fall or grow with size?).

The functions that measure any model stay where a user's checkpoint reaches them
(:func:`tailtheory.tim.precision.precision_mismatch`,
:func:`tailtheory.mismatch.batch_shape.batch_shape_mismatch`); here they run on each built rung
(:func:`measure_precision`: ``results/precision_ladder.json``, ``tailtheory ladder precision``;
:func:`measure_batch_shape`: ``results/batch_shape_ladder.json``, ``tailtheory ladder
batch-shape``), and the stored rows are read with the ledger's criteria (:func:`v7_verdict`,
:func:`v8_trend`); :mod:`tailtheory.ladder.effects` prints both after the effects' trends.
"""

from __future__ import annotations

import json


from tailtheory.core.measurements import measurement_path
from tailtheory.core.provenance import cpu_model
from tailtheory.engine.start.corpus_lm import (RECORD, corpus_key, heldout_stream,
                                               load_corpus_lm)
from tailtheory.engine.start.corpus_lm import cache_root as corpus_root
from tailtheory.engine.start.rungs import RUNGS, rung
from tailtheory.engine.threads import torch_threads
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.ladder.build import built_names, require_built, store_rung, stored, warm_policy
from tailtheory.ladder.trend import size_trend
from tailtheory.mismatch.batch_shape import batch_shape_mismatch, ragged_windows
from tailtheory.tim.precision import precision_mismatch

MIN_RUNGS, MIN_SEEDS = 4, 3
"""Rungs a verdict over the ladder needs, and seeds a rung needs to count in an effect's trend
(the ledger's rule, for every trend of :mod:`tailtheory.ladder.effects` and
:mod:`tailtheory.ladder.decide`)."""


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


# ---- measuring on the rungs ---------------------------------------------------------------

PRECISION = "precision_ladder"
"""``results/precision_ladder.json``: V7's one-step numbers per rung of the ladder."""

N_PROMPTS = 64
"""Held-out ``kk_prose`` prompts a rung's warm start answers for V7 (the ledger's criterion)."""


def measure_precision(names: list[str] | None = None, threads: int = 1) -> dict[str, dict]:
    """V7 on the warm starts of the built rungs ``names`` (default: every rung
    ``results/ladder.json`` holds built), stored per rung in ``results/precision_ladder.json`` as
    each finishes. A rung whose warm start is not in the cache here is a ``ValueError`` naming
    the command that builds it (nothing is trained here)."""
    built, out = stored(), {}
    for name in built_names(names):
        model, task, warm = warm_policy(name)
        with torch_threads(threads):
            out[name] = {**precision_mismatch(model, task, N_PROMPTS), "rung": name,
                         "non_embedding_params": built[name]["non_embedding_params"],
                         "warm_key": warm.name, "cpu": cpu_model()}
        store_rung(PRECISION, name, out[name], {"n_prompts": N_PROMPTS},
                   measure_command(PRECISION))
    return out


BATCH_SHAPE = "batch_shape_ladder"
"""``results/batch_shape_ladder.json``: V8's rows per rung (:func:`measure_batch_shape`)."""

SHAPE_WINDOWS = dict(n=32, min_len=16, max_len=128, seed=0)
"""V8's sequences per rung: windows of the rung's held-out corpus stream (the ledger's
criterion)."""


def measure_batch_shape(names: list[str] | None = None, threads: int = 1) -> dict[str, list]:
    """V8 on the built rungs ``names`` (default: every rung ``results/ladder.json`` holds built):
    :func:`batch_shape_mismatch` of the rung's corpus LM on :data:`SHAPE_WINDOWS`, stored per
    rung in ``results/batch_shape_ladder.json`` as each finishes. A rung not built here is a
    ``ValueError`` naming the command that builds it."""
    built = stored()
    names = names or [r.name for r in RUNGS if r.name in built]
    out = {}
    for name in names:
        path = corpus_root() / corpus_key(rung(name).corpus())
        require_built(name, path / RECORD)
        model, tok = load_corpus_lm(path)
        seqs = ragged_windows(heldout_stream(path), **SHAPE_WINDOWS)
        with torch_threads(threads):
            rows = batch_shape_mismatch(model.float().eval(), seqs, pad_id=tok.pad_token_id)
        out[name] = [{**row, "rung": name, "non_embedding_params": built[name][
            "non_embedding_params"], "cpu": cpu_model()} for row in rows]
        store_rung(BATCH_SHAPE, name, out[name], {"windows": SHAPE_WINDOWS},
                   measure_command(BATCH_SHAPE))
    return out


MEASURES = (
    register_measure(Measure(
        PRECISION, "V7: the bf16 / fp16 mismatch ratio on every built rung's warm start",
        f"not recorded; {N_PROMPTS} prompts answered on each built rung",
        lambda: {"n_prompts": N_PROMPTS}, lambda: measure_precision(), resume="parts")),
    register_measure(Measure(
        BATCH_SHAPE, "V8: the batch-shape mismatch of every built rung's corpus LM",
        f"not recorded; {SHAPE_WINDOWS['n']} windows forwarded at several batch shapes on each "
        f"built rung", lambda: {"windows": SHAPE_WINDOWS}, lambda: measure_batch_shape(),
        resume="parts")))
