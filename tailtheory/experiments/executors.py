"""Where a study's runs train: this machine, a Ray cluster, or a SLURM job array.

``tailtheory study NAME --executor local|ray|slurm`` (or :func:`run_study`). ``local`` is the
run cache's own workers (:func:`tailtheory.experiments.runs.run_many`), child processes of this
machine that each train into ``cache/runs`` and are stored from there; it is the default. The
other two send runs away and have one writer, the driver (this process):

- it resolves each run's starting model once, with its fingerprint, and ships its files
  (:func:`tailtheory.experiments.remote.make_job`): a warm start's in each job; a model saved in
  a folder (``--model PATH``) put once in Ray's object store, every job referencing that copy
  (:func:`start_refs`), or, under SLURM, read by each node at the driver's path;
- a worker writes them to a private folder, checks the package version and the fingerprints,
  trains, and returns the run's record (:func:`tailtheory.experiments.remote.run_job`);
- the driver stores each record as it arrives (:func:`tailtheory.experiments.incremental.store_rows`,
  under the store's lock). Workers never write ``results/``.

``ray`` runs each run as a Ray task (Ray core: ``pip install 'tailtheory[ray]'``) on the cluster
at :attr:`ClusterOptions.address`, else on a local Ray instance; a worker or node lost mid-run is
retried (``max_retries``, ``OOM_RETRIES`` for the memory monitor's kills), an exception
inside a run is not (``retry_exceptions=False``). ``slurm`` submits one submitit job array per
study (``pip install 'tailtheory[slurm]'``), :attr:`ClusterOptions.runs_per_job` runs per array
element, requeued on preemption (:class:`tailtheory.experiments.remote.ArrayElement`); submitit's
folder must be shared with the nodes. A run that raises is reported with the tail of its log,
never re-rolled; the others are stored. A driver started again skips what is stored.
The options and flags of the backends are :mod:`tailtheory.experiments.cluster`'s.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable

import torch

from tailtheory.core.io import atomic_write_json
from tailtheory.experiments import runs as run_cache
from tailtheory.experiments.cluster import OOM_RETRIES, ClusterOptions, check_executor
from tailtheory.experiments.incremental import store_done, store_rows, stored_record
from tailtheory.experiments.remote import ArrayElement, make_job, read_model_files, run_job


def todo(study, preset: str, options: ClusterOptions = ClusterOptions()) -> list[tuple]:
    """``(label, config)`` of each run of ``study`` to train (neither stored nor in this
    machine's run cache), seed by seed across the arms (a sweep stopped part-way holds the same
    seeds of every arm), on ``options.device`` when it names one."""
    status = study.status(preset)
    runs = sorted(((label, c) for label, s in status.items() for c in s["train"]),
                  key=lambda lc: lc[1].seed)
    return [(lb, replace(c, device=options.device) if options.device else c) for lb, c in runs]


def jobs(study, preset: str, runs: list[tuple], options: ClusterOptions) -> list:
    """The :class:`~tailtheory.experiments.remote.RunJob` of each ``(label, config)``."""
    arms = {a.label: a for a in study.plan(preset)}
    return [make_job(label, c, partial(study.run_numbers, cfg=c, arm=arms[label]), options.cache)
            for label, c in runs]


def _store(study, preset: str, record: dict) -> None:
    """Store one record a worker returned (the driver is the only writer)."""
    row = record["row"]
    store_rows(study, preset, {record["label"]: {row["seed"]: (row, record["identity"])}})


def run_study(study, preset: str | None = None, executor: str = "local", workers: int = 2,
              options: ClusterOptions = ClusterOptions(), progress: bool = True) -> list[dict]:
    """Train what ``study`` lacks on ``executor`` and store each run as it arrives; returns the
    records received (``[]`` for ``local``, which stores from its run cache). Runs that fail are
    raised together at the end (:class:`RuntimeError`), after the others are stored."""
    preset = preset or study.measure_preset
    check_executor(executor)
    if executor == "local":
        run_local(study, preset, workers, options, progress)
        return []
    if preset != study.measure_preset:
        raise ValueError(f"--executor {executor} stores the runs it receives: it runs the stored "
                         f"preset ({study.measure_preset}), not {preset}")
    store_done(study, preset)  # what this machine's run cache holds needs no worker
    work = jobs(study, preset, todo(study, preset, options), options)
    records: list[dict] = []

    def received(record: dict) -> None:
        _store(study, preset, record)
        records.append(record)

    if executor == "ray":
        failed = run_ray(work, received, options, progress)
    else:
        failed = run_slurm(work, received, options, progress, study.name)
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(work)} runs failed (not retried):\n"
                           + "\n".join(failed))
    return records


def run_local(study, preset: str, workers: int, options: ClusterOptions,
              progress: bool = True) -> None:
    """The run cache's workers (:func:`~tailtheory.experiments.runs.run_many`), each run stored
    as it finishes. With :attr:`ClusterOptions.device` the runs train there (their rows keep the
    study's identity: the device is the machine, not the experiment); on ``cuda``,
    :attr:`ClusterOptions.per_gpu` processes share each visible GPU."""
    runs = todo(study, preset, options)
    if options.device is None:  # today's path: stored from the run cache, config by config
        run_cache.run_many([c for _, c in runs], workers=workers, progress=progress,
                           on_done=lambda cfg: store_done(study, preset))
        store_done(study, preset)
        return
    arms, labels = {a.label: a for a in study.plan(preset)}, {c: lb for lb, c in runs}
    ident = {lb: {c.seed: i for c, i in zip(arms[lb].configs, rows)}
             for lb, rows in study.identity(preset).items()}
    gpus = visible_gpus() if options.device == "cuda" else 0

    def stored(cfg) -> None:
        lb = labels[cfg]
        run = run_cache.runs_root() / run_cache.run_key(cfg)
        row = {"seed": cfg.seed, **study.run_numbers(run, cfg, arms[lb])}
        store_rows(study, preset, {lb: {cfg.seed: (row, ident[lb][cfg.seed])}})

    run_cache.run_many([c for _, c in runs], workers=options.per_gpu * gpus if gpus else workers,
                       progress=progress, on_done=stored, gpus=gpus)


def visible_gpus() -> int:
    """The CUDA GPUs torch sees here (0 without any)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _bar(total: int, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="records", unit="run", disable=not progress, file=sys.stderr)


def ray_resources(options: ClusterOptions, device: str) -> dict:
    """A run's Ray resources: one CPU, and ``1/per_gpu`` of a GPU when it trains on CUDA."""
    gpu = device.startswith("cuda")
    return {"num_cpus": 1, "num_gpus": 1 / options.per_gpu if gpu else 0}


def start_refs(jobs: list, put: Callable) -> list:
    """Per job, the object its folder model's files travel in (``None`` for a job without one):
    ``put(files)`` once per folder's contents (``ray.put``), so the files of a checkpoint the
    whole study starts from are read and stored once, not once per run."""
    refs: dict[str, object] = {}
    for job in jobs:
        if job.folder is not None and job.identity["checkpoint"] not in refs:
            refs[job.identity["checkpoint"]] = put(read_model_files(job.folder))
    return [refs[j.identity["checkpoint"]] if j.folder is not None else None for j in jobs]


def run_ray(jobs: list, received: Callable, options: ClusterOptions, progress: bool) -> list[str]:
    """Each job as a Ray task; ``received(record)`` as each arrives. Returns the failures (a run
    that raised: its message and log tail; a task whose retries ran out). Ctrl-C cancels the
    tasks left. A Ray instance this call starts is shut down on return."""
    import ray

    os.environ.setdefault("RAY_task_oom_retries", str(OOM_RETRIES))
    started = not ray.is_initialized()
    if started:
        ray.init(address=options.address, include_dashboard=False, log_to_driver=False)
    task = ray.remote(run_job)
    refs = {task.options(max_retries=options.max_retries, retry_exceptions=False,
                         **ray_resources(options, job.cfg.device)).remote(job, files): job
            for job, files in zip(jobs, start_refs(jobs, ray.put))}
    failed, pending, bar = [], list(refs), _bar(len(jobs), progress)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    received(ray.get(ref))
                    bar.update()
                except ray.exceptions.RayTaskError as exc:  # raised inside the run
                    failed.append(str(getattr(exc, "cause", None) or exc))
                except ray.exceptions.RayError as exc:      # lost more times than retried
                    job = refs[ref]
                    failed.append(f"run {job.key} ({job.label}, seed {job.cfg.seed}): {exc}")
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        print(f"cancelled {len(pending)} Ray tasks", file=sys.stderr)
        raise
    finally:
        bar.close()
        if started:
            ray.shutdown()
    return failed


def chunks(items: list, size: int) -> list[list]:
    """``items`` in consecutive pieces of ``size`` (the last one shorter)."""
    return [items[i:i + size] for i in range(0, len(items), size)]


ACTIVE = ("RUNNING", "PENDING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED")
"""SLURM states of a recorded array element that a restarted driver waits for (any other state
without a result: the element vanished, and its runs are submitted again)."""


def array_path(folder: str, name: str) -> Path:
    """Where the driver records study ``name``'s job array (element ids and their runs' keys)."""
    return Path(folder) / f"{name}.array.json"


def _job_class(cluster: str):
    import submitit

    return {"slurm": submitit.SlurmJob, "local": submitit.LocalJob,
            "debug": submitit.DebugJob}[cluster]


def _state(sub) -> str:
    """An element's scheduler state, its first word (``"UNKNOWN"`` when it cannot be read)."""
    try:
        return (sub.state.split() or ["UNKNOWN"])[0]
    except Exception:  # noqa: BLE001 - a job the scheduler no longer knows
        return "UNKNOWN"


def reattach(cluster: str, folder: str, name: str, jobs: list) -> tuple[list, list, list]:
    """The recorded array of study ``name``, as a restarted driver finds it:
    ``(elements, records, rest)``: ``(job, runs)`` of the elements still queued or running
    (waited for), the records of those that finished (stored at once), and the runs of
    ``jobs`` that no live or finished element holds (failed or vanished: submitted again)."""
    path = array_path(folder, name)
    by_key = {j.key: j for j in jobs}
    live, records, held = [], [], set()
    recorded = json.loads(path.read_text())["elements"] if path.exists() else []
    for el in recorded:
        part = [by_key[k] for k in el["keys"] if k in by_key and k not in held]
        if not part:
            continue
        sub = _job_class(cluster)(folder=folder, job_id=el["job_id"])
        if sub.paths.result_pickle.exists():
            try:
                records += [r for r in sub.result() if r["key"] in by_key]
            except Exception:  # noqa: BLE001 - the element failed: its runs go again
                continue
        elif _state(sub) in ACTIVE:
            live.append((sub, part))
        else:
            continue                                # vanished: its runs go again
        held.update(j.key for j in part)
    return live, records, [j for j in jobs if j.key not in held]


def run_slurm(jobs: list, received: Callable, options: ClusterOptions,
              progress: bool, name: str = "study") -> list[str]:
    """One submitit job array: :attr:`ClusterOptions.runs_per_job` jobs per element, each element
    requeued on preemption; ``received(record)`` as each element's records arrive. The array is
    recorded in the folder (:func:`array_path`): started again, the driver re-attaches to it
    (:func:`reattach`) and submits only the runs that failed or vanished. Returns the failures.
    Ctrl-C prints the array's job ids (the jobs keep running: ``scancel`` stops them)."""
    import submitit

    if not jobs:
        return []
    ex = submitit.AutoExecutor(folder=options.folder, cluster=options.cluster)
    live, done, rest = reattach(ex.cluster, options.folder, name, jobs)
    gpu = jobs[0].cfg.device.startswith("cuda")
    ex.update_parameters(timeout_min=options.time_min, gpus_per_node=1 if gpu else 0,
                         cpus_per_task=1, slurm_additional_parameters={"requeue": True},
                         **({"slurm_partition": options.partition} if options.partition else {}))
    parts = chunks(rest, options.runs_per_job)
    elements = live + list(zip(ex.map_array(ArrayElement(), parts) if parts else [], parts))
    atomic_write_json(array_path(options.folder, name), {"elements": [
        {"job_id": sub.job_id, "keys": [j.key for j in part]} for sub, part in elements]})
    failed, bar = [], _bar(len(jobs), progress)
    try:
        for record in done:
            received(record)
            bar.update()
        for sub, part in elements:
            try:
                for record in sub.result():
                    received(record)
                    bar.update()
            except Exception as exc:  # noqa: BLE001 - a run raised, or the element was lost
                failed.append(f"array element {sub.job_id} ({len(part)} runs): {exc}")
    except KeyboardInterrupt:
        print("interrupted; the job array keeps running: "
              + " ".join(sub.job_id for sub, _ in elements), file=sys.stderr)
        raise
    finally:
        bar.close()
    return failed


def plan_text(study, preset: str, executor: str, workers: int,
              options: ClusterOptions = ClusterOptions()) -> str:
    """What ``tailtheory study --dry-run`` prints of an executor: the runs it would start and
    their estimated cost (the stored runs' mean CPU seconds, when they recorded them)."""
    runs = todo(study, preset, options)
    cpu = [r["cpu_seconds"] for rows in _stored(study).values() for r in rows
           if "cpu_seconds" in r]
    cost = (f"about {len(runs) * sum(cpu) / len(cpu) / 3600:.1f} CPU hours (stored runs' mean "
            f"{sum(cpu) / len(cpu):.0f} s each)" if cpu else "cost unknown (no stored run "
                                                             "recorded its CPU seconds)")
    lines = [f"{lb} seed {c.seed} on {c.device}" for lb, c in runs]
    if executor == "local":
        how = f"{len(runs)} runs in {workers} worker processes of this machine"
    elif executor == "ray":
        res = ray_resources(options, runs[0][1].device) if runs else {}
        how = (f"{len(runs)} Ray tasks ({res}) on {options.address or 'a local Ray instance'}, "
               f"max_retries={options.max_retries}")
    else:
        how = (f"{len(runs)} runs in one job array of "
               f"{math.ceil(len(runs) / options.runs_per_job)} elements ({options.runs_per_job} "
               f"runs each, {options.time_min} min, partition "
               f"{options.partition or 'default'}), folder {options.folder}")
    return "\n".join([*lines, f"{executor}: {how}; {cost}"])


def _stored(study) -> dict:
    return stored_record(study.name).get("data", {})


TIMING_KEYS = ("cpu_seconds", "attempt")
"""Fields of a record that say how a run went, not what it computed: left out when executors
are compared (:func:`without_timings`); ``time/*`` metric series likewise."""


def without_timings(record: dict) -> dict:
    """``record`` (its ``row`` too) less :data:`TIMING_KEYS` and the ``time/`` series."""
    row = {k: v for k, v in record["row"].items()
           if k not in TIMING_KEYS and not k.startswith("time/")}
    out = {k: v for k, v in record.items() if k not in TIMING_KEYS}
    return {**out, "row": row}
