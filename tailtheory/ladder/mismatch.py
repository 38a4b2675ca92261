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
import math

import torch
from scipy import stats


from tailtheory.core import measurements
from tailtheory.core.measurements import measurement_path, update_measurement
from tailtheory.core.provenance import cpu_model, machine, weights_fingerprint
from tailtheory.engine.start.corpus_lm import (RECORD, corpus_key, heldout_stream,
                                               load_corpus_lm)
from tailtheory.engine.start.corpus_lm import cache_root as corpus_root
from tailtheory.engine.start.rungs import RUNGS, rung
from tailtheory.engine.threads import torch_threads
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.ladder import models
from tailtheory.ladder.build import built_names, require_built, store_rung, stored, warm_policy
from tailtheory.ladder.trend import size_trend
from tailtheory.mismatch.batch_shape import batch_shape_mismatch, ragged_windows
from tailtheory.tim.precision import precision_mismatch, ratio_interval

MIN_RUNGS, MIN_SEEDS = 4, 3
"""Rungs a verdict over the ladder needs, and seeds a rung needs to count in an effect's trend
(the ledger's rule, for every trend of :mod:`tailtheory.ladder.effects` and
:mod:`tailtheory.ladder.decide`)."""


V8_DELTA = 0.005
"""V8's ``delta`` per decade: the share of ``hf`` bf16 batch-32 tokens with ``|Delta| > 1e-3``."""

V7_RANGE = (32.0, 128.0)
"""V7: the bf16 / fp16 k3 ratio's interval must lie inside this range (64 predicted)."""


def stored_data(store: str) -> dict:
    """The ``data`` of stored measurement ``store`` (``{}`` when it is missing; an unreadable file
    is an error, :func:`tailtheory.core.measurements.stored_data`)."""
    return measurements.stored_data(store)


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
    each finishes, with the warm start's key and fingerprint and the CPU. A rung whose warm start
    is not in the cache here is a ``ValueError`` naming the command that builds it (nothing is
    trained here)."""
    built, out = stored(), {}
    for name in built_names(names):
        model, task, warm = warm_policy(name)
        with torch_threads(threads):
            out[name] = {**precision_mismatch(model, task, N_PROMPTS), "rung": name,
                         "non_embedding_params": built[name]["non_embedding_params"],
                         "warm_key": warm.name, "weights": weights_fingerprint(model.float()),
                         "cpu": cpu_model()}
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
    rung in ``results/batch_shape_ladder.json`` as each finishes, each row with the corpus LM's
    fingerprint (``corpus_weights``, as ``v8_models`` names it) and the CPU. A rung not built here
    is a ``ValueError`` naming the command that builds it."""
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
        corpus = weights_fingerprint(model.float())
        out[name] = [{**row, "rung": name, "non_embedding_params": built[name][
            "non_embedding_params"], "corpus_weights": corpus, "cpu": cpu_model()}
            for row in rows]
        store_rung(BATCH_SHAPE, name, out[name], {"windows": SHAPE_WINDOWS},
                   measure_command(BATCH_SHAPE))
    return out


# ---- V7 on named models --------------------------------------------------------------------

V7_RULES = {
    "v7_64": {"n_prompts": N_PROMPTS, "n_boot": 2000, "mc_sd": None},
    "v7_units": {"n_prompts": 256, "n_boot": 2000, "mc_sd": 0.05},
}
"""V7's designs on a named model, store name -> sizes: ``v7_64`` is the rule the rungs were
first measured under (64 prompts, one bootstrap of 2,000 resamples); ``v7_units`` the rule
written after it (ledger): 256 prompts, and bootstrap resamples doubled until each bound's Monte
Carlo sd is at most 0.05 (:func:`settled_interval`), builds the units, the machine a factor."""


def settled_interval(num, den, mc_sd: float | None, n_boot: int = 2000, runs: int = 8,
                     seed: int = 0, most: int = 2 ** 20) -> dict:
    """The bf16 / fp16 ratio of per-response sums ``num``, ``den`` ((B,) each) with its 95%
    percentile bootstrap interval. ``mc_sd=None``: one bootstrap of ``n_boot`` resamples (seed
    ``seed``), as first measured. Else ``runs`` independent bootstraps of ``n_boot`` resamples,
    the bounds the quantiles of all of them pooled, each bound's Monte Carlo sd estimated as
    the sd of the runs' bounds over ``sqrt(runs)``; ``n_boot`` doubles until both are at most
    ``mc_sd`` (a ``RuntimeError`` past ``most`` resamples a run). -> ``ratio``, ``low``,
    ``high``, ``n_boot`` (a run), ``runs``, ``mc_sd`` (the larger of the two bounds')."""
    num = torch.as_tensor(num, dtype=torch.float64)[:, None]
    den = torch.as_tensor(den, dtype=torch.float64)[:, None]
    ones = torch.ones_like(num)
    if mc_sd is None:
        ratio, low, high = ratio_interval(num, den, ones, n_boot=n_boot, seed=seed)
        return {"ratio": ratio, "low": low, "high": high, "n_boot": n_boot, "runs": 1,
                "mc_sd": None}
    sn, sd = num[:, 0], den[:, 0]
    while True:
        bounds, pooled = [], []
        for r in range(runs):
            g = torch.Generator().manual_seed(seed + r)
            idx = torch.randint(len(sn), (n_boot, len(sn)), generator=g)
            boot = sn[idx].sum(1) / sd[idx].sum(1)
            bounds.append(torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)))
            pooled.append(boot)
        b = torch.stack(bounds)                                     # (runs, 2)
        err = float((b.std(0, unbiased=True) / runs ** 0.5).max())
        if err <= mc_sd:
            low, high = torch.quantile(torch.cat(pooled), torch.tensor(
                [0.025, 0.975], dtype=torch.float64)).tolist()
            return {"ratio": float(sn.sum() / sd.sum()), "low": low, "high": high,
                    "n_boot": n_boot, "runs": runs, "mc_sd": err}
        if n_boot * 2 > most:
            raise RuntimeError(f"the bounds' Monte Carlo sd is {err:.3g} > {mc_sd} at {n_boot} "
                               f"resamples a run")
        n_boot *= 2


def model_verdict(intervals: dict) -> str:
    """A model's V7 verdict from its settings' ``(ratio, low, high)``: HOLDS when every interval
    lies inside :data:`V7_RANGE`, REFUTED when one lies wholly outside it, else NOT-REPRODUCED
    (the ledger's rule, per model)."""
    lo, hi = V7_RANGE
    if any(b < lo or a > hi for _, a, b in intervals.values()):
        return "REFUTED"
    return "HOLDS" if all(lo <= a and b <= hi for _, a, b in intervals.values()) \
        else "NOT-REPRODUCED"


def measure_v7(names: list[str] | None = None, rule: str = "v7_64", threads: int = 1,
               device: str = "cpu") -> dict[str, dict]:
    """V7 under ``rule`` (:data:`V7_RULES`) on the models ``names`` (labels of
    :mod:`tailtheory.ladder.models`; default: every model whose weights are kept here and that
    ``rule``'s store lacks), each stored in ``results/<rule>.json`` under its label as it
    finishes, with its fingerprint and the machine that measured it. Every response's k3 sums
    are kept, so an interval can be recomputed from the store. A model not kept here is a
    ``ValueError`` naming what would build it."""
    if rule not in V7_RULES:
        raise ValueError(f"unknown V7 rule {rule!r}; valid: {', '.join(V7_RULES)}")
    spec, have = V7_RULES[rule], stored_data(rule)
    names = names or [k for k in models.read() if k not in have and models.locate(k)]
    out = {}
    for name in names:
        model, task, folder = models.load(name, device=device)
        row = models.read()[name]
        with torch_threads(threads):
            got = precision_mismatch(model, task, spec["n_prompts"], per_response=True)
        for setting, x in got["settings"].items():
            x.update(settled_interval(x["sums"]["bf16"], x["sums"]["fp16"], spec["mc_sd"],
                                      spec["n_boot"]))
        out[name] = {**got, "model": name, "weights": row["warm"]["weights"],
                     "machine": machine(device), "rung": row["rung"], "build": row["build"],
                     "non_embedding_params": row["non_embedding_params"], "rule": rule,
                     "verdict": model_verdict({k: (v["ratio"], v["low"], v["high"])
                                               for k, v in got["settings"].items()})}
        _store_model(rule, name, out[name], spec)
    return out


def _store_model(store: str, name: str, value, config: dict) -> None:
    """Put ``value`` under model ``name`` in ``results/<store>.json``, keeping the others."""
    def merged():
        data = dict(stored_data(store))
        data[name] = value
        return config, data

    update_measurement(store, merged, measure_command(store))


def v7_models(rule: str = "v7_64") -> dict:
    """V7 under ``rule`` per stored model (its verdict, intervals, machine) and the claim's:
    REFUTED when any model is, HOLDS when every model of at least :data:`MIN_RUNGS` rungs
    holds, else NOT-REPRODUCED (PENDING while fewer rungs are measured and none is refuted)."""
    rows = []
    for name, x in stored_data(rule).items():
        if not isinstance(x, dict) or "settings" not in x:
            continue
        ivs = {k: (v["ratio"], v["low"], v["high"]) for k, v in x["settings"].items()}
        rows.append({"model": name, "rung": x["rung"], "machine": x["machine"],
                     "intervals": ivs, "verdict": model_verdict(ivs)})
    verdicts, rungs = {x["verdict"] for x in rows}, {x["rung"] for x in rows}
    verdict = ("REFUTED" if "REFUTED" in verdicts else
               f"PENDING ({len(rungs)} of {MIN_RUNGS} rungs measured)" if len(rungs) < MIN_RUNGS
               else "HOLDS" if verdicts == {"HOLDS"} else "NOT-REPRODUCED")
    return {"rule": rule, "models": rows, "verdict": verdict}


V7_MIN_BUILDS = 3
"""Builds of a rung, measured on one machine, that the rule with builds as units judges."""


def rung_v7(builds: list[dict]) -> dict:
    """V7 at one rung on one machine from its builds' rows (``v7_units``, each with
    ``settings``): per setting the mean of the builds' ``log10`` ratios with a t interval on
    ``builds - 1`` degrees of freedom, its se the larger of the builds' spread and their mean
    bootstrap se (``(log10 high - log10 low) / 3.92``) over ``sqrt(builds)``; HOLDS when every
    setting's interval lies inside :data:`V7_RANGE`, REFUTED when one lies wholly outside,
    NOT-REPRODUCED otherwise; fewer than :data:`V7_MIN_BUILDS` builds: EXPLORATORY."""
    n = len(builds)
    if n < V7_MIN_BUILDS:
        return {"builds": n, "verdict": "EXPLORATORY"}
    out = {"builds": n, "settings": {}}
    for setting in builds[0]["settings"]:
        logs = [math.log10(b["settings"][setting]["ratio"]) for b in builds]
        boot = [(math.log10(b["settings"][setting]["high"])
                 - math.log10(b["settings"][setting]["low"])) / 3.92 for b in builds]
        mean = sum(logs) / n
        spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        se = max(spread, sum(boot) / n) / math.sqrt(n)
        half = float(stats.t.ppf(0.975, n - 1)) * se
        out["settings"][setting] = (10 ** mean, 10 ** (mean - half), 10 ** (mean + half))
    out["verdict"] = model_verdict(out["settings"])
    return out


def v7_units() -> dict:
    """V7 under the rule with builds as units (``results/v7_units.json``): per machine, per rung
    :func:`rung_v7` over its builds measured there, and the machine's verdict: REFUTED when a
    rung with :data:`V7_MIN_BUILDS` builds is, HOLDS when every such rung (at least 3) holds,
    NOT-REPRODUCED when some such rung neither holds nor is refuted, PENDING while fewer than 3
    rungs have the builds. Machines are never pooled."""
    rows = [x for x in stored_data("v7_units").values() if isinstance(x, dict)
            and "settings" in x]
    out = {}
    for where in sorted({x["machine"] for x in rows}):
        here = [x for x in rows if x["machine"] == where]
        rungs = {r.name: rung_v7([x for x in here if x["rung"] == r.name]) for r in RUNGS
                 if any(x["rung"] == r.name for x in here)}
        judged = {k: v["verdict"] for k, v in rungs.items() if v["verdict"] != "EXPLORATORY"}
        verdict = ("REFUTED" if "REFUTED" in judged.values() else
                   f"PENDING ({len(judged)} of 3 rungs with {V7_MIN_BUILDS} builds)"
                   if len(judged) < 3 else "HOLDS" if set(judged.values()) == {"HOLDS"}
                   else "NOT-REPRODUCED")
        out[where] = {"rungs": rungs, "verdict": verdict,
                      "models": {x["model"]: x["verdict"] for x in here}}
    return out


MEASURES = (
    *(register_measure(Measure(
        rule, f"V7 on every named model kept here: {spec['n_prompts']} prompts"
        + (f", bootstrap bounds to a Monte Carlo sd of {spec['mc_sd']}" if spec["mc_sd"] else ""),
        f"about {spec['n_prompts'] // 64} CPU-minute(s) a base model, more with size",
        lambda spec=spec: spec, lambda rule=rule: measure_v7(rule=rule), resume="yes"))
      for rule, spec in V7_RULES.items()),
    register_measure(Measure(
        PRECISION, "V7 on the first builds' warm starts, rows naming no model: a record of "
                   "the first rule, superseded by v7_64 and v7_units on named models")),
    register_measure(Measure(
        BATCH_SHAPE, "V8 on the first builds' corpus LMs, rows naming no model: a record of the "
                     "first rule, superseded by v8_models on named models")))
