"""The effects measured on named models: the ladder's per-build points of the trend rule.

Each part of :mod:`tailtheory.ladder.effects` (``tail``: M7, V2; ``p4``; ``lopti``: L1, L4, L5;
``decisive``; ``step``) runs unchanged on a model of :mod:`tailtheory.ladder.models` (a build of
a rung, named by its weights), with probe seeds :data:`SEEDS`; each (model, part, seed) is stored
in ``results/ladder_probes.json`` as it finishes, with the model's fingerprint and the machine
that measured it. V8 (batch shape) runs on a model's corpus LM (:func:`measure_v8`, store
``results/v8_models.json``), named by the corpus LM's own fingerprint.

The trend rule over builds (ledger; :func:`tailtheory.ladder.trend.build_trend`) reads one point
per build: its mean over the probe seeds. :func:`family` gathers the points of the
:data:`FAMILY` of trend tests on one machine and decides them together by Holm's method
(:func:`tailtheory.ladder.trend.family_verdicts`); rungs with fewer than :data:`MIN_BUILDS`
builds are exploratory, shown beside the trend and never in it.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy import stats

from tailtheory.core.measurements import update_measurement
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.engine.start.corpus_lm import RECORD, heldout_stream, load_corpus_lm
from tailtheory.engine.start.corpus_lm import cache_root as corpus_root
from tailtheory.engine.start.rungs import RUNGS
from tailtheory.engine.threads import pinned_threads, torch_threads
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.ladder import models
from tailtheory.ladder.effects import EFFECTS, MEASURE, effects_config
from tailtheory.ladder.mismatch import SHAPE_WINDOWS, stored_data
from tailtheory.ladder.trend import build_trend, family_verdicts
from tailtheory.mismatch.batch_shape import batch_shape_mismatch, ragged_windows

STORE = "ladder_probes"
"""``results/ladder_probes.json``: model label -> part -> probe seed (a string) -> numbers."""

V8_STORE = "v8_models"
"""``results/v8_models.json``: model label -> V8's rows on the model's corpus LM."""

PARTS = ("tail", "p4", "lopti")
"""The parts the trend family reads (``decisive`` and ``step`` may be asked for by name)."""

SEEDS = (1, 2, 3)
"""Probe seeds of a build (the rollouts' and batches' seeds; the model is the build's)."""

MIN_BUILDS, MIN_RUNGS = 3, 3
"""Builds a rung needs to enter a trend, and rungs a trend needs (the ledger's rule)."""

LOG_DELTA = math.log10(1.25)
"""``delta`` per decade of an effect trended in ``log10`` (a share, a k3): 25% a decade."""

FAMILY = {
    **{name: (part, key, delta, False) for name, (part, key, delta) in EFFECTS.items()
       if name != "P4 removed"},
    "P4 removed": ("p4", "p4_removed", LOG_DELTA, True),
    "V8 share": ("v8", "over_1e3", LOG_DELTA, True),
}
"""The family of trend tests, listed before any row (ledger): effect -> (part, key, ``delta``
per decade, trended in ``log10``). Holm's method runs over all of them."""


def config() -> dict:
    """What ``results/ladder_probes.json`` is keyed by: the parts' sizes and the seeds."""
    return {**effects_config(), "seeds": list(SEEDS)}


def read(store: str = STORE) -> dict:
    """A store of this module: label -> ... (``{}`` when missing)."""
    return stored_data(store)


def _put(store: str, name: str, value, cfg: dict) -> None:
    def merged():
        data = dict(read(store))
        data[name] = value
        return cfg, {k: data[k] for k in sorted(data, key=models.sort_key)}

    update_measurement(store, merged, measure_command(store))


def measure_probes(names: list[str] | None = None, parts=PARTS, seeds=SEEDS, threads: int = 1,
                   progress: bool = True) -> dict:
    """Measure ``parts`` x ``seeds`` on the models ``names`` (labels; default every model whose
    weights are kept here), skipping what is stored, each (model, part, seed) stored as it
    finishes with its seconds (wall time on ``threads`` threads). Returns the store."""
    for part in parts:
        if part not in MEASURE or part == "lopti_decide":
            raise ValueError(f"unknown part {part!r}; valid: tail, p4, lopti, decisive, step")
    names = names or [k for k in models.read() if models.locate(k)]
    for name in names:
        todo = [(p, s) for s in seeds for p in parts
                if str(s) not in read().get(name, {}).get(p, {})]
        if not todo:
            continue
        model, task, _ = models.load(name)
        weights = weights_fingerprint(model.float())
        for part, seed in todo:
            t0 = time.perf_counter()
            with pinned_threads(threads):
                row = MEASURE[part](model, task, seed)
            value = read().get(name, {})
            value.setdefault(part, {})[str(seed)] = {
                **row, "model": name, "weights": weights, "machine": machine(),
                "seconds": round(time.perf_counter() - t0, 1), "threads": threads}
            _put(STORE, name, value, config())
            if progress:
                print(f"{name} {part} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    return read()


def measure_v8(names: list[str] | None = None, threads: int = 1) -> dict:
    """V8 on the corpus LMs of the models ``names`` (default: every model whose corpus LM is in
    this cache and not yet stored): :func:`batch_shape_mismatch` on :data:`SHAPE_WINDOWS`, the
    corpus LM's fingerprint checked against the model's row."""
    rows = models.read()
    names = names or [k for k, v in rows.items() if v.get("corpus") and k not in read(V8_STORE)
                      and (corpus_root() / v["corpus"]["key"] / RECORD).exists()]
    for name in names:
        c = rows[name].get("corpus")
        if not c:
            raise ValueError(f"model {name} records no corpus LM; build it: tailtheory ladder "
                             f"build --rung {rows[name]['rung']} --build {rows[name]['build']}")
        path = corpus_root() / c["key"]
        model, tok = load_corpus_lm(path)
        if weights_fingerprint(model.float()) != c["weights"]:
            raise ValueError(f"{path} is not model {name}'s corpus LM ({c['weights']})")
        seqs = ragged_windows(heldout_stream(path), **SHAPE_WINDOWS)
        with torch_threads(threads):
            got = batch_shape_mismatch(model.float().eval(), seqs, pad_id=tok.pad_token_id)
        _put(V8_STORE, name, {"rows": got, "model": name, "corpus_weights": c["weights"],
                              "machine": machine()}, {"windows": SHAPE_WINDOWS})
    return read(V8_STORE)


def share_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) ``level`` interval of a share of ``k`` tokens in ``n``: what
    a share at an instrument's floor can and cannot say (``k = 0`` gives
    ``[0, 1 - (alpha/2)^(1/n)]``, not 0)."""
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n and n > 0):
        raise ValueError(f"need integers 0 <= k <= n, n > 0, got k={k!r}, n={n!r}")
    a = 1 - level
    low = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return low, high


def v8_count(entry: dict) -> tuple[int, int] | None:
    """V8's effect in a stored entry as ``(tokens over 1e-3, tokens)`` (``hf`` bf16, batch 32)."""
    hit = [x for x in entry.get("rows", []) if (x.get("decoder"), x.get("dtype"), x.get("batch"))
           == ("hf", "bf16", 32)]
    if not hit:
        return None
    n = int(hit[0]["tokens"])
    return round(float(hit[0]["over_1e3"]) * n), n


def v8_value(entry: dict) -> float | None:
    """V8's effect in a stored entry: ``hf`` bf16 at batch 32, the share with ``|Delta| >
    1e-3``."""
    hit = [x for x in entry.get("rows", []) if (x.get("decoder"), x.get("dtype"), x.get("batch"))
           == ("hf", "bf16", 32)]
    return float(hit[0]["over_1e3"]) if hit else None


def points(effect: str, on: str | None = None) -> list[dict]:
    """Per model measured on machine ``on`` (default: every machine), ``effect``'s probe-seed
    values: ``label``, ``rung``, ``params`` (non-embedding), ``machine``, ``values``."""
    part, key, _, _ = FAMILY[effect]
    rows, out = models.read(), []
    for name, row in rows.items():
        if part == "v8":
            entry = read(V8_STORE).get(name)
            vals = [v8_value(entry)] if entry and v8_value(entry) is not None else []
            where = {entry["machine"]} if vals else set()
        else:
            seeds = read().get(name, {}).get(part, {})
            vals = [v[key] for v in seeds.values() if isinstance(v, dict)
                    and isinstance(v.get(key), (int, float)) and math.isfinite(v[key])]
            where = {v.get("machine") for v in seeds.values() if isinstance(v, dict)}
        if not vals or (on is not None and where != {on}):
            continue
        if len(where) > 1:
            raise ValueError(f"{effect} on {name}: probe seeds measured on {sorted(where)}; "
                             f"a build's point comes from one machine")
        out.append({"label": name, "rung": row["rung"], "params": row["non_embedding_params"],
                    "machine": where.pop(), "values": vals})
    return out


def main_machine() -> str | None:
    """The machine that measured the most probe-seed rows of ``results/ladder_probes.json`` (ties:
    the first by name); ``None`` when none is stored. The registered trend claims are judged on
    it, so their verdicts do not depend on the machine that reads them."""
    count: dict[str, int] = {}
    for parts in read().values():
        for seeds in (parts.values() if isinstance(parts, dict) else ()):
            for row in (seeds.values() if isinstance(seeds, dict) else ()):
                if isinstance(row, dict) and row.get("machine"):
                    count[row["machine"]] = count.get(row["machine"], 0) + 1
    return min(count, key=lambda m: (-count[m], m)) if count else None


def family(on: str | None = None) -> dict:
    """The trend family on machine ``on`` (default: this machine): per effect its builds,
    the rungs in the trend (at least :data:`MIN_BUILDS` builds each) and the exploratory ones,
    the :class:`~tailtheory.ladder.trend.BuildTrend` when at least :data:`MIN_RUNGS` rungs are
    in, and the family's Holm verdicts over the effects that have a trend."""
    on = on or machine()
    out, trends = {}, {}
    for effect, (_, _, delta, log) in FAMILY.items():
        pts = points(effect, on)
        count = {r.name: sum(p["rung"] == r.name for p in pts) for r in RUNGS}
        inside = [p for p in pts if count[p["rung"]] >= MIN_BUILDS]
        res = {"delta": delta, "log": log, "builds": pts,
               "exploratory": [p for p in pts if count[p["rung"]] < MIN_BUILDS]}
        rungs = {p["rung"] for p in inside}
        if len(rungs) >= MIN_RUNGS:
            try:
                trends[effect] = build_trend([p["params"] for p in inside],
                                             [p["values"] for p in inside], delta, log=log,
                                             names=[p["label"] for p in inside])
            except ValueError as exc:
                res["verdict"] = f"NOT JUDGED ({exc})"
            else:
                res["trend"] = trends[effect]
        else:
            res["verdict"] = (f"PENDING ({len(rungs)} of {MIN_RUNGS} rungs with {MIN_BUILDS} "
                              f"builds)")
        out[effect] = res
    for effect, v in (family_verdicts(trends, size=len(FAMILY)) if trends else {}).items():
        out[effect]["verdict"], out[effect]["holm"] = v.verdict, v
    return {"machine": on, "family": list(FAMILY), "effects": out}


def table(on: str | None = None) -> str:
    """:func:`family` as text: per effect its verdict (Holm over the family), slope with its
    unadjusted interval and adjusted p, and each build's point."""
    fam = family(on)
    lines = [f"Trend family over builds on {fam['machine']} ({len(fam['family'])} tests, Holm "
             f"at 5%):"]
    for effect, r in fam["effects"].items():
        cells = ", ".join(f"{p['label']} {np.mean(p['values']):.3g} ({len(p['values'])})"
                          for p in r["builds"]) or "no build measured"
        t, h = r.get("trend"), r.get("holm")
        fit = (f"; slope {t.slope:+.3g} per decade ({t.low:+.3g} to {t.high:+.3g}, se from the "
               f"{t.se_source}), Holm p {h.p_adjusted:.3g}" if t is not None and h is not None
               else "")
        lines.append(f"  {effect:11s} {r['verdict']}{fit}: {cells}")
    return "\n".join(lines)


MEASURES = (
    register_measure(Measure(
        STORE, "L1, L4, L5, M7, V2 and P4 on every named model kept here, per part and probe "
        "seed", "about 7 CPU-minutes a probe seed of a base build, 12 of w192, 20 of w256; "
        "stored parts are skipped", config, lambda: measure_probes(), resume="yes")),
    register_measure(Measure(
        V8_STORE, "V8: the batch-shape mismatch of every named model's corpus LM",
        f"under a minute a base model; {SHAPE_WINDOWS['n']} windows at several batch shapes",
        lambda: {"windows": SHAPE_WINDOWS}, lambda: measure_v8(), resume="yes")),
)
"""The stores this module makes (``tailtheory measure NAME``)."""
