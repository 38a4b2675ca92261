"""One run of a study away from the driver: what travels to a worker and what comes back.

A study run on a cluster (:mod:`tailtheory.experiments.executors`) has one writer and one builder,
the driver. For each run it resolves the starting model once (:func:`make_job`: the warm start's
folder, found or trained in the driver's cache, with its weights fingerprint) and ships its files
in a :class:`RunJob`; the worker (:func:`run_job`) checks the package version and the fingerprint,
trains into a private attempt folder (``runs/.attempts/<key>-<id>/run``, renamed to
``runs/<key>`` when done, so a killed attempt never leaves a half run under the run's key), and
returns the run's record: its config, its store identity and the numbers the study stores. It
never builds a warm start and never writes ``results/``: only the driver stores
(:func:`tailtheory.experiments.incremental.store_rows`). Under SLURM an :class:`ArrayElement`
runs several jobs in turn and is requeued when preempted.

A ``tiny`` model is a random initialisation from the run's seed, not a trained start: the worker
initialises it as the trainer always does and checks it against the driver's fingerprint. A model
saved in a folder of the driver's is not shipped (its path is part of the run's config):
:func:`make_job` refuses it with one line.

The run's checkpoints stay in the worker's run cache (``$TAILTHEORY_CACHE/runs``), or under
:attr:`RunJob.cache` when a path shared by every node is given.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import tempfile
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import tailtheory
from tailtheory.core.provenance import weights_fingerprint
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.load import from_folder, load_start, read_provenance, warm_config
from tailtheory.engine.start.warm_cache import warm_start
from tailtheory.engine.trainer import train
from tailtheory.experiments.runs import (_add_cpu_seconds, _same_config, finished_steps,
                                         run_identity, run_key, runs_root)

LOG_TAIL = 2000
"""Characters of a failed run's log (its last ones) reported to the driver, as the local
workers report theirs (:func:`tailtheory.experiments.runs._run_workers`)."""

ATTEMPTS = ".attempts"
"""The folder of a run cache that holds the private folder of each attempt at a run."""


class RunFailed(RuntimeError):
    """A run raised inside its worker: a fault of the run, reported and never retried (a
    diverged seed must not be re-rolled until it passes)."""


@dataclass(frozen=True)
class RunJob:
    """Everything a worker needs for one run; plain data plus the study's numbers function."""

    label: str
    """The run's arm."""
    cfg: TrainConfig
    """The run's config, as the driver holds it."""
    key: str
    """The run's cache key on the driver (:func:`~tailtheory.experiments.runs.run_key`)."""
    identity: dict
    """The run's store identity (``run_identity(cfg, "store")``), what its row is keyed by."""
    numbers: Callable
    """``numbers(run_dir) -> dict``: the study's numbers of the finished run
    (:meth:`~tailtheory.experiments.study.Study.run_numbers` with its config and arm)."""
    weights: str
    """The fingerprint of the starting weights (:func:`~tailtheory.core.provenance.weights_fingerprint`)."""
    start: dict | None = None
    """A ``warm`` model's warm-start folder: file name -> bytes (``None`` for a ``tiny`` model)."""
    version: str = tailtheory.__version__
    """The driver's package version (the worker refuses another)."""
    cache: str | None = None
    """A run cache shared by the nodes (``None``: the worker's own, ``$TAILTHEORY_CACHE``)."""


def start_files(folder: Path) -> dict[str, bytes]:
    """The files of a warm-start folder (weights, config, tokenizer, record), name -> bytes."""
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}


def make_job(label: str, cfg: TrainConfig, numbers: Callable, cache: str | None = None) -> RunJob:
    """The :class:`RunJob` of one run, its start resolved here, on the driver: a warm start found
    or trained in this cache and read into bytes, a ``tiny`` model initialised to take its
    fingerprint. A model saved in a folder is refused (its path would not exist on a worker)."""
    if from_folder(cfg):
        raise ValueError(f"a run starting from the folder {cfg.model} cannot leave this machine "
                         f"(the folder is not shipped); use --executor local")
    folder = warm_start(warm_config(cfg), progress=False) if cfg.model == "warm" else None
    model, _ = load_start(cfg, folder)
    return RunJob(label, cfg, run_key(cfg), run_identity(cfg, "store"), numbers,
                  weights_fingerprint(model),
                  start_files(folder) if folder is not None else None, cache=cache)


def _runs_root(job: RunJob) -> Path:
    return Path(job.cache) / "runs" if job.cache else runs_root()


def _check(job: RunJob, warm: Path | None) -> None:
    """Refuse a job of another package version, or whose start is not the driver's weights."""
    if job.version != tailtheory.__version__:
        raise RunFailed(f"run {job.key}: the driver runs tailtheory {job.version}, this worker "
                        f"{tailtheory.__version__}; install the same version on every node")
    found = weights_fingerprint(load_start(job.cfg, warm)[0])
    if found != job.weights:
        raise RunFailed(f"run {job.key}: the starting weights here ({found}) are not the "
                        f"driver's ({job.weights})")


def _train_attempt(job: RunJob, final: Path, attempt: Path) -> None:
    """Train ``job`` into ``attempt/run`` (its log in ``attempt/log.txt``), then rename it to
    ``final``; an exception is :class:`RunFailed` with the log's tail."""
    attempt.mkdir(parents=True)
    (attempt / "attempt.txt").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    log = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="tailtheory-start-") as tmp:
        warm = None
        if job.start is not None:
            warm = Path(tmp)
            for name, blob in job.start.items():
                (warm / name).write_bytes(blob)
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                _check(job, warm)
                t0 = time.process_time()
                train(replace(job.cfg, out=str(attempt / "run")), progress=False, warm=warm)
                _add_cpu_seconds(attempt / "run", time.process_time() - t0)
        except Exception as exc:
            text = log.getvalue() + traceback.format_exc()
            (attempt / "log.txt").write_text(text)
            raise RunFailed(f"run {job.key} ({job.label}, seed {job.cfg.seed}) failed: "
                            f"{type(exc).__name__}: {exc}\n{text[-LOG_TAIL:]}") from None
    (attempt / "log.txt").write_text(log.getvalue())
    if final.exists():  # a shorter or stale run under the key: moved aside, then deleted
        old = attempt.with_name(attempt.name + "-replaced")
        final.rename(old)
        shutil.rmtree(old)
    (attempt / "run").rename(final)
    shutil.rmtree(attempt)


def attempts(root: Path, key: str) -> list[Path]:
    """The attempt folders a run cache holds for run ``key`` (those of killed attempts)."""
    where = root / ATTEMPTS
    return sorted(where.glob(f"{key}-*")) if where.exists() else []


def _finished_here(job: RunJob, final: Path) -> bool:
    """Whether this worker's run cache holds ``job``'s run finished, under its config and from
    the driver's starting weights (a run another start trained under the key is trained again)."""
    prov = read_provenance(final) if final.exists() else None
    return (finished_steps(final) >= job.cfg.steps and _same_config(final, job.cfg)
            and prov is not None and prov["weights"] == job.weights)


def run_job(job: RunJob) -> dict:
    """Run one :class:`RunJob` on this worker (or find it finished in this worker's run cache)
    and return its record: ``label``, ``key``, ``config`` (the driver's config's fields),
    ``identity``, ``row`` (``{"seed", **numbers}``) and ``attempt`` (1 + the attempts at this run
    a killed worker left here)."""
    root = _runs_root(job)
    final = root / job.key
    attempt = 1 + len(attempts(root, job.key))
    if not _finished_here(job, final):
        _train_attempt(job, final, root / ATTEMPTS / f"{job.key}-{uuid.uuid4().hex[:8]}")
    return {"label": job.label, "key": job.key, "config": asdict(job.cfg),
            "identity": job.identity, "row": {"seed": job.cfg.seed, **job.numbers(final)},
            "attempt": attempt}


def run_jobs(jobs: list[RunJob]) -> list[dict]:
    """:func:`run_job` of each job in turn (several runs in one array element of a cluster);
    a failure stops the element (its runs are reported together by the driver)."""
    return [run_job(j) for j in jobs]


class ArrayElement:
    """``element(jobs) -> records``: :func:`run_jobs`, one element of a study's SLURM job array.

    On preemption or timeout SLURM signals the job and submitit calls :meth:`checkpoint`, which
    requeues the same element (submitit's ``Checkpointable`` protocol): the runs it finished
    before are found in the node's run cache (or the shared one) and not trained again."""

    def __call__(self, jobs: list) -> list[dict]:
        return run_jobs(jobs)

    def checkpoint(self, *args, **kwargs):
        """The same element with the same runs, for submitit to requeue."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)
