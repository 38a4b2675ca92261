"""A study measured a few runs at a time: every finished run's numbers stored as it completes.

A long sweep (tens of runs of several CPU minutes each) cannot wait for its last run before it
keeps anything, and the run cache (``cache/runs``) stays on the machine that trained. A study
marked ``incremental`` therefore stores ``results/<name>.json`` with one row per *finished* run:
its numbers and its run's identity (the config less directory, threads and device, with the warm
start's key). :func:`store_done` reads every run the cache holds at full length, without
training anything, and rewrites the file under the store's lock, merged with what the file holds
at that moment (rows stored for runs this cache lacks are kept, so a sweep split across machines,
or two studies storing at once, extends one measurement: the rows are the union by arm and seed). :func:`load_done` checks every
stored row against the config the code asks for that arm and seed today: a row made by another
config is refused (never silently reused), and what is not stored yet is reported as missing, so
a verdict can say which seeds it rests on.

The file is plain JSON (reading it cannot run code), as every stored measurement.
"""

from __future__ import annotations

import json

from tailtheory.core.measurements import (StaleMeasurement, check_rows, fingerprint,
                                          measurement_path, record_use, update_measurement)
from tailtheory.experiments.comparison import Measurement
from tailtheory.experiments.presets import check_preset
from tailtheory.experiments.runs import finished_steps, run_key, runs_root


def study_identities(study, preset: str) -> dict[str, dict[int, dict]]:
    """Label -> seed -> the identity of that run, as ``Study.identity`` keys it."""
    ident = study.identity(preset)
    return {a.label: {c.seed: i for c, i in zip(a.configs, ident[a.label])}
            for a in study.plan(preset)}


def stored_record(name: str) -> dict:
    """The stored record of ``name`` (``{}`` when there is none); a malformed one is refused."""
    path = measurement_path(name)
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
        rows, idents = record["data"], record["config"]
        if not all(len(rows[lb]) == len(idents[lb]) for lb in rows):
            raise ValueError("rows and identities differ in number")
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise StaleMeasurement(f"{path} is not a stored measurement ({exc})") from exc
    return record


def regime(preset: str) -> dict:
    """What a stored measurement of ``preset`` records about where its runs ran: the preset, and
    for ``learn`` the recipe it runs (the learning testbed)."""
    return {"preset": check_preset(preset), **({"recipe": "learn"} if preset == "learn" else {})}


def store_done(study, preset: str | None = None) -> dict[str, int]:
    """Measure every run of ``study`` that the run cache holds at full length (nothing is
    trained) and store them with the rows stored for runs this cache lacks, as the file holds
    them when it is written (under its lock: a row another process stored meanwhile is kept).
    Returns label -> the number of runs stored."""
    preset = preset or study.measure_preset
    want = study_identities(study, preset)
    fresh: dict[str, dict[int, tuple]] = {}
    for arm in study.plan(preset):  # the slow part (reading runs), before the lock
        for c in arm.configs:
            run = runs_root() / run_key(c)
            if finished_steps(run) >= c.steps:
                fresh.setdefault(arm.label, {})[c.seed] = (
                    {"seed": c.seed, **study.run_numbers(run, c, arm)}, want[arm.label][c.seed])
    return store_rows(study, preset, fresh)


def store_rows(study, preset: str, fresh: dict[str, dict[int, tuple]]) -> dict[str, int]:
    """Store ``fresh`` (label -> seed -> ``(row, identity)``) with the rows the file holds when
    it is written (under its lock), as :func:`store_done` does with what the run cache holds; a
    row whose identity is not the one the code asks for its arm and seed today is dropped.
    The one writer of a study's rows: the runs a cluster's workers return are stored here, by
    the driver (:mod:`tailtheory.experiments.executors`). Returns label -> runs stored."""
    want = study_identities(study, preset)
    plan = study.plan(preset)
    fresh = {lb: {s: ri for s, ri in by_seed.items() if want.get(lb, {}).get(s) == ri[1]}
             for lb, by_seed in fresh.items()}
    rows: dict[str, list] = {}

    def merged() -> tuple[dict, dict]:  # called holding the lock: the file as it is now
        old = stored_record(study.name)
        rows.clear()
        idents: dict[str, list] = {}
        for arm in plan:
            kept = {r["seed"]: (r, i) for r, i in zip(old.get("data", {}).get(arm.label, []),
                                                      old.get("config", {}).get(arm.label, []))
                    if want[arm.label].get(r["seed"]) == i}
            kept.update(fresh.get(arm.label, {}))
            if kept:
                order = sorted(kept)
                rows[arm.label] = [kept[s][0] for s in order]
                idents[arm.label] = [kept[s][1] for s in order]
        return idents, rows

    update_measurement(study.name, merged, study.command, regime=regime(preset))
    return {label: len(r) for label, r in rows.items()}


def load_done(study, preset: str | None = None) -> Measurement:
    """The stored runs of ``study`` as a :class:`Measurement` whose ``missing`` maps each arm to
    the seeds not stored yet. A stored row whose identity is not the one the code asks for its
    arm and seed is :class:`StaleMeasurement` (naming the command that measures it again)."""
    preset = preset or study.measure_preset
    record = stored_record(study.name)
    if not record:
        raise StaleMeasurement(f"no stored measurement {measurement_path(study.name)}; measure it with: "
                               f"{study.command}")
    if record.get("fingerprint") != fingerprint(record["config"]):
        raise StaleMeasurement(f"{measurement_path(study.name)} does not match its own config")
    check_rows(measurement_path(study.name), record["data"], study.command)
    want = study_identities(study, preset)
    for label, idents in record["config"].items():
        for row, ident in zip(record["data"][label], idents):
            if want.get(label, {}).get(row["seed"]) != ident:
                raise StaleMeasurement(
                    f"{measurement_path(study.name)}: arm {label!r} seed {row['seed']} was measured under "
                    f"another config; measure it again with: {study.command}")
    record_use(study.name, study.command)
    data = record["data"]
    missing = {lb: sorted(set(seeds) - {r["seed"] for r in data.get(lb, [])})
               for lb, seeds in want.items()}
    return Measurement(data, study.plan(preset), study.name,
                       missing={lb: s for lb, s in missing.items() if s})
