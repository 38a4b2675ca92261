"""One run of a study away from the driver: what travels to a worker and what comes back.

A study run on a cluster (:mod:`tailtheory.experiments.executors`) has one writer and one builder,
the driver. For each run it resolves the starting model once (:func:`make_job`: the warm start's
folder, found or trained in the driver's cache, or a model saved in a folder, with its weights
fingerprint); the worker (:func:`run_job`) writes the start's files to a private temporary
folder, checks the package version and the fingerprints, trains into a private attempt folder
(``runs/.attempts/<key>-<id>/run``, renamed to ``runs/<key>`` when done, so a killed attempt
never leaves a half run under the run's key), and returns the run's record: its config, its
store identity and the numbers the study stores. It never builds a warm start and never writes
``results/``: only the driver stores (:func:`tailtheory.experiments.incremental.store_rows`).
Under SLURM an :class:`ArrayElement` runs several jobs in turn and is requeued when preempted.

Where the start's files travel:

- a warm start's (a few MB) in the :class:`RunJob` itself (:attr:`RunJob.start`);
- a model saved in a folder (``--model PATH``, a user's checkpoint; up to GBs) apart from the
  jobs: :attr:`RunJob.folder` is the folder's path resolved on the driver, and its files
  (:func:`model_files`) reach :func:`run_job` as ``files``, one copy every job of the study
  references (Ray's object store), or, without them (SLURM), are read at that path on the node,
  which must see it as the driver does (a filesystem the nodes share, as submitit's folder is).
  Either way the worker trains from its own copy (:class:`~tailtheory.engine.load.FolderCopy`),
  refuses it unless its fingerprint (weights, config and tokenizer:
  :func:`~tailtheory.core.models.checkpoint_fingerprint`) is the one the run's identity holds, and
  records the driver's path as the run's start: its key, identity, config and row are those the
  driver's machine would have made;
- a ``tiny`` model's nowhere: it is a random initialisation from the run's seed, which the worker
  makes as the trainer always does and checks against the driver's fingerprint.

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
from functools import lru_cache
from pathlib import Path
from typing import Callable

import tailtheory
from tailtheory.core.models import TOKENIZER_FILES, checkpoint_fingerprint, load_lm
from tailtheory.core.provenance import weights_fingerprint
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.load import (FolderCopy, check_start, from_folder, load_start,
                                    read_provenance, warm_config)
from tailtheory.engine.tasks.chat import GENERATION_CONFIG
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
    """A ``warm`` model's warm-start folder: file name -> bytes (``None`` for any other model)."""
    folder: str | None = None
    """A model saved in a folder: its path resolved on the driver (``None`` for any other model);
    its files travel apart (:func:`run_job`)."""
    version: str = tailtheory.__version__
    """The driver's package version (the worker refuses another)."""
    cache: str | None = None
    """A run cache shared by the nodes (``None``: the worker's own, ``$TAILTHEORY_CACHE``)."""


def start_files(folder: Path) -> dict[str, bytes]:
    """The files of a warm-start folder (weights, config, tokenizer, record), name -> bytes."""
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}


MODEL_FILES = ("config.json", GENERATION_CONFIG, *TOKENIZER_FILES)
"""The files of a saved model's folder a run reads, beside its ``*.safetensors`` weights and
their index (:func:`model_files`); anything else there (an optimizer's state, logs) stays."""


def model_files(folder: str | Path) -> list[str]:
    """The names of the files of the model saved in ``folder`` that a run reads:
    :data:`MODEL_FILES` and the weights (``*.safetensors``, ``*.safetensors.index.json``)."""
    folder = Path(folder)
    weights = [*folder.glob("*.safetensors"), *folder.glob("*.safetensors.index.json")]
    return sorted({*(n for n in MODEL_FILES if (folder / n).is_file()), *(p.name for p in weights)})


def read_model_files(folder: str | Path) -> dict[str, bytes]:
    """:func:`model_files` of ``folder``, name -> bytes: what one copy of it ships."""
    return {n: (Path(folder) / n).read_bytes() for n in model_files(folder)}


@lru_cache(maxsize=8)
def _folder_weights(folder: str, checkpoint: str) -> str:
    """The weights fingerprint of the model in ``folder`` whose files have ``checkpoint``'s
    fingerprint: loaded once per study, not once per run."""
    del checkpoint  # the cache's key: another model saved at the path is loaded again
    return weights_fingerprint(load_lm(folder, device="cpu").float())


def make_job(label: str, cfg: TrainConfig, numbers: Callable, cache: str | None = None) -> RunJob:
    """The :class:`RunJob` of one run, its start resolved here, on the driver: a warm start found
    or trained in this cache and read into bytes, a model saved in a folder checked
    (:func:`~tailtheory.engine.load.check_start`) and fingerprinted (its files are read by the
    executor, once), a ``tiny`` model initialised to take its fingerprint."""
    ident = run_identity(cfg, "store")
    if from_folder(cfg):
        check_start(cfg, cfg.model)
        folder = str(Path(cfg.model).resolve())
        return RunJob(label, cfg, run_key(cfg), ident, numbers,
                      _folder_weights(folder, ident["checkpoint"]), folder=folder, cache=cache)
    folder = warm_start(warm_config(cfg), progress=False) if cfg.model == "warm" else None
    model, _ = load_start(cfg, folder)
    return RunJob(label, cfg, run_key(cfg), ident, numbers, weights_fingerprint(model),
                  start_files(folder) if folder is not None else None, cache=cache)


def _runs_root(job: RunJob) -> Path:
    return Path(job.cache) / "runs" if job.cache else runs_root()


def _write_start(job: RunJob, files: dict | None, tmp: Path) -> tuple:
    """Write the job's start into the private folder ``tmp``: ``(warm, copy)``, the warm start's
    folder or the :class:`~tailtheory.engine.load.FolderCopy` of a folder model (``None`` each
    when the job has none). A folder's files are ``files``, else read at :attr:`RunJob.folder`."""
    if job.folder is None:
        for name, blob in (job.start or {}).items():
            (tmp / name).write_bytes(blob)
        return (tmp if job.start is not None else None), None
    if files is None:       # not shipped: the node reads the folder where the driver did
        if not Path(job.folder).is_dir():
            raise RunFailed(f"run {job.key}: the model folder {job.folder} is not readable on "
                            f"{socket.gethostname()}; put it on a filesystem every node sees")
        for name in model_files(job.folder):
            shutil.copyfile(Path(job.folder) / name, tmp / name)
    else:
        for name, blob in files.items():
            (tmp / name).write_bytes(blob)
    return None, FolderCopy(tmp, job.folder)


def _check(job: RunJob, warm: Path | None, copy: FolderCopy | None = None) -> None:
    """Refuse a job whose start is not the driver's: a folder's files that changed since the
    driver read them (their fingerprint, which the run's identity holds), other weights."""
    if copy is not None and (found := checkpoint_fingerprint(copy.here)) != job.identity[
            "checkpoint"]:
        raise RunFailed(f"run {job.key}: the files of {job.folder} here (fingerprint {found}) "
                        f"are not those the driver read ({job.identity['checkpoint']}): the "
                        f"folder changed since; start the study again")
    found = weights_fingerprint(load_start(job.cfg, warm, copy=copy)[0])
    if found != job.weights:
        raise RunFailed(f"run {job.key}: the starting weights here ({found}) are not the "
                        f"driver's ({job.weights})")


def _check_version(job: RunJob) -> None:
    """Refuse a job of another package version than this worker's."""
    if job.version != tailtheory.__version__:
        raise RunFailed(f"run {job.key}: the driver runs tailtheory {job.version}, this worker "
                        f"{tailtheory.__version__}; install the same version on every node")


def _train_attempt(job: RunJob, final: Path, attempt: Path, files: dict | None = None) -> None:
    """Train ``job`` into ``attempt/run`` (its log in ``attempt/log.txt``) from its start written
    to a private temporary folder (:func:`_write_start`), then rename it to ``final``; an
    exception is :class:`RunFailed` with the log's tail."""
    attempt.mkdir(parents=True)
    (attempt / "attempt.txt").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    log = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="tailtheory-start-") as tmp:
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                _check_version(job)
                warm, copy = _write_start(job, files, Path(tmp))
                _check(job, warm, copy)
                t0 = time.process_time()
                train(replace(job.cfg, out=str(attempt / "run")), progress=False, warm=warm,
                      copy=copy)
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


def run_job(job: RunJob, files: dict | None = None) -> dict:
    """Run one :class:`RunJob` on this worker (or find it finished in this worker's run cache)
    and return its record: ``label``, ``key``, ``config`` (the driver's config's fields),
    ``identity``, ``row`` (``{"seed", **numbers}``) and ``attempt`` (1 + the attempts at this run
    a killed worker left here). ``files``: a folder model's files (:func:`read_model_files`)
    when they travel apart from the job; ``None``: read at :attr:`RunJob.folder` here."""
    root = _runs_root(job)
    final = root / job.key
    attempt = 1 + len(attempts(root, job.key))
    if not _finished_here(job, final):
        _train_attempt(job, final, root / ATTEMPTS / f"{job.key}-{uuid.uuid4().hex[:8]}", files)
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
