"""Cached training runs: one run directory per config, several seeds per call.

A run is deterministic given its config, so it is cached under ``cache/runs/<key>/`` where the
key hashes every field that changes what the run computes (all but the run's length, its
directory, checkpoint spacing and thread count), the resolved device and, for ``model="warm"``,
the warm start's own cache key; for a model saved in a folder, the folder's
:func:`~tailtheory.core.models.checkpoint_fingerprint` (its weights and tokenizer: another model
saved at the same path is another run). A notebook that asks again gets the finished run back; one that
asks for more steps continues it (``--resume``; the first ``n`` lines of a longer run are those of
a run of ``n`` steps); a cached directory whose stored config differs from the one asked for is
recomputed, never silently reused.

Example::

    cfg = TrainConfig(task="kk_trace", method="ar", steps=30)
    paths = run_seeds(cfg, seeds=(0, 1, 2), workers=2)
    df = load_runs(paths)      # one row per (run, step), a ``seed`` and a ``label`` column
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from tailtheory.core.io import atomic_write_json
from tailtheory.core.models import checkpoint_fingerprint
from tailtheory.engine.checkpoint import read_metrics
from tailtheory.engine.config import TrainConfig, identity_fields, without_added_defaults
from tailtheory.engine.devices import resolve_device
from tailtheory.engine.rundir import RunDirError, RunInUse, clear_run, wait_for_writer
from tailtheory.engine.load import start_key
from tailtheory.engine.load import read_provenance, warm_config
from tailtheory.engine.start.warm_cache import cache_root, warm_weights
from tailtheory.engine.trainer import train

RUNS_CACHE_VERSION = 1
"""Part of every key: bump it when a change to the engine changes what a run computes."""

NOT_IN_KEY = identity_fields("length", "place", "speed")
"""Fields that do not change a run's lines (only how many there are, where and how fast)."""


def runs_root() -> Path:
    """``cache/runs`` beside the warm starts' ``cache/sft`` (``$TAILTHEORY_CACHE`` moves both)."""
    return cache_root().parent / "runs"


VIEWS = ("cache", "store")
"""The named views of a run's identity (:func:`run_identity`)."""


def run_identity(cfg: TrainConfig, view: str = "cache") -> dict:
    """A run's identity, the one function every key of a run is computed by.

    ``view="cache"``: what the run cache's key hashes (:func:`run_key`): the config less
    :data:`NOT_IN_KEY`, the resolved device, and what the run starts from: the warm start's
    config hash (:func:`tailtheory.engine.load.start_key`) or, for a model saved in a
    folder, the folder's :func:`~tailtheory.core.models.checkpoint_fingerprint` (its weights
    and tokenizer, not only its name). ``view="store"``: what a study's stored row is keyed by
    (:meth:`tailtheory.experiments.study.Study.identity`): the same less the machine (the device,
    named by the run key), plus the run's length (a stored row is a run of that many steps).
    """
    if view not in VIEWS:
        raise ValueError(f"unknown identity view {view!r}; views: {', '.join(VIEWS)}")
    ident = {k: v for k, v in without_added_defaults(asdict(cfg)).items() if k not in NOT_IN_KEY}
    ident["device"] = resolve_device(cfg.device)
    if cfg.model == "warm":
        ident["warm_start"] = start_key(cfg)
    elif cfg.model != "tiny":  # a folder: what it holds, not only its name
        ident["checkpoint"] = checkpoint_fingerprint(cfg.model)
    ident = {"version": RUNS_CACHE_VERSION, **ident}
    if view == "store":
        machine = identity_fields("machine")
        ident = {**{k: v for k, v in ident.items() if k not in machine}, "steps": cfg.steps}
    return ident


def run_key(cfg: TrainConfig) -> str:
    """16 hex digits of SHA-256 over :func:`run_identity`."""
    blob = json.dumps(run_identity(cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def finished_steps(run: Path) -> int:
    """How many steps the run in folder ``run`` has finished (its metric lines; 0 for none)."""
    return len(read_metrics(run)) if (run / "metrics.jsonl").exists() else 0


def _same_config(run: Path, cfg: TrainConfig) -> bool:
    try:
        stored = json.loads((run / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    keep = lambda d: {k: v for k, v in without_added_defaults(d).items()  # noqa: E731
                      if k not in NOT_IN_KEY}
    return keep(stored) == keep(asdict(cfg))


def _same_start(run: Path, cfg: TrainConfig) -> bool:
    """Whether a cached run started from the warm start cached here today (a cache shared between
    machines can hold runs from another CPU's warm start under the same key)."""

    prov = read_provenance(run)
    if prov is None or cfg.model != "warm":
        return True
    weights = warm_weights(warm_config(cfg))
    return weights is None or weights == prov["weights"]


RACE_RETRIES = 3
"""How often :func:`cached_run` looks again at a run another process began between its look and
its own start (two notebooks asking for one run at once)."""


def cached_run(cfg: TrainConfig, progress: bool = True, _retries: int = RACE_RETRIES) -> Path:
    """The cached run of ``cfg`` with at least ``cfg.steps`` steps (trained or continued first).

    ``cfg.out`` is ignored: the run lives in ``runs_root() / run_key(cfg)``. A run another
    process is training is waited for, then read or continued.
    """

    out = runs_root() / run_key(cfg)
    cfg = replace(cfg, out=str(out))
    existed = out.exists()
    if existed:
        wait_for_writer(out)  # another process (a worker, a notebook) may be training this run
    done = finished_steps(out) if out.exists() else 0
    if out.exists() and not (done and _same_config(out, cfg) and _same_start(out, cfg)):
        if done:
            print(f"tailtheory: cached run {out} holds another config or starts from another "
                  f"model than today's warm start; recomputing it", file=sys.stderr)
        clear_run(out)  # another config, or stopped before its first line: start afresh
        done = 0
    if done >= cfg.steps:
        return out
    t0 = time.process_time()
    try:
        train(cfg, resume=done > 0, progress=progress)
    except RunDirError as exc:
        # another process began this run after the look above (it holds the lock, or it made
        # the folder since): wait for it, then read, continue or start afresh what it left
        raced = isinstance(exc, RunInUse) or (not existed and out.exists())
        if not raced or _retries <= 0:
            raise
        wait_for_writer(out)
        return cached_run(cfg, progress, _retries - 1)
    _add_cpu_seconds(out, time.process_time() - t0)
    return out


CPU_FILE = "cpu_seconds.json"
"""Where a cached run records the CPU seconds its training took (over every resume)."""


def _add_cpu_seconds(run: Path, seconds: float) -> None:
    """Add ``seconds`` (this process's CPU time, every thread) to the run's record."""
    path = run / CPU_FILE
    before = json.loads(path.read_text())["cpu_seconds"] if path.exists() else 0.0
    atomic_write_json(path, {"cpu_seconds": before + seconds})


def cpu_seconds(run) -> float | None:
    """The CPU seconds a cached run's training took (``None`` when not recorded)."""
    path = Path(run) / CPU_FILE
    return json.loads(path.read_text())["cpu_seconds"] if path.exists() else None


def _worker(argv: list[str]) -> int:
    """``python -m tailtheory.experiments.runs FIELDS_JSON``: one worker's run (the config travels as
    plain JSON fields and is rebuilt and checked here)."""
    cached_run(TrainConfig(**json.loads(argv[0])), progress=False)
    return 0


def _run_workers(configs: list[TrainConfig], workers: int, done, gpus: int = 0) -> None:
    """Train ``configs`` in up to ``workers`` child processes (one torch thread each); a child is a
    fresh interpreter, so this works from scripts, notebooks and the CLI alike. ``done(cfg)`` is
    called as each run that succeeded finishes; failures are collected and raised together at
    the end (the runs that finished stay in the cache). ``gpus`` > 0: each child sees one of
    that many GPUs (``CUDA_VISIBLE_DEVICES``), the one fewest running children share."""
    import os
    import subprocess
    import tempfile
    import time

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    pending, running, failed = list(configs), [], []
    while pending or running:
        while pending and len(running) < workers:
            cfg = pending.pop(0)
            log = tempfile.TemporaryFile(mode="w+")
            gpu = min(range(gpus), key=[r[3] for r in running].count) if gpus else None
            child = env if gpu is None else {**env, "CUDA_VISIBLE_DEVICES": str(gpu)}
            proc = subprocess.Popen([sys.executable, "-m", "tailtheory.experiments.runs",
                                     json.dumps(asdict(cfg))], stdout=log, stderr=log, env=child)
            running.append((proc, cfg, log, gpu))
        time.sleep(0.2)
        for item in [r for r in running if r[0].poll() is not None]:
            proc, cfg, log, _ = item
            running.remove(item)
            if proc.returncode != 0:
                log.seek(0)
                failed.append(f"{run_key(cfg)} ({cfg.method}, seed {cfg.seed}): exit "
                              f"{proc.returncode}\n{log.read()[-2000:]}")
            log.close()
            if proc.returncode == 0:
                done(cfg)
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(configs)} runs failed:\n" + "\n".join(failed))


def run_seeds(cfg: TrainConfig, seeds=(0, 1, 2), workers: int = 1,
              progress: bool = True) -> list[Path]:
    """:func:`cached_run` of ``cfg`` at each seed; ``workers`` > 1 runs them in that many
    processes (one torch thread each on the CPU). Returns the run directories in seed order."""
    return run_many([replace(cfg, seed=int(s)) for s in seeds], workers, progress)


def run_many(configs: list[TrainConfig], workers: int = 1, progress: bool = True,
             on_done=None, gpus: int = 0) -> list[Path]:
    """:func:`cached_run` of every config (cached ones return at once), in order; ``workers`` > 1
    trains that many at a time, each in its own interpreter with one torch thread.
    ``on_done(cfg)`` is called as each run this call trains finishes (a sweep stores it then);
    a run that fails is reported with the others at the end and is not passed to it. ``gpus``:
    spread the workers over that many GPUs (``workers / gpus`` runs share each)."""
    from tqdm.auto import tqdm

    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    configs = list(configs)
    todo = [c for c in configs if finished_steps(runs_root() / run_key(c)) < c.steps]
    bar = tqdm(total=len(configs), initial=len(configs) - len(todo), desc="runs", unit="run",
               disable=not progress, file=sys.stderr)

    def finished(cfg: TrainConfig) -> None:
        bar.update()
        if on_done is not None:
            on_done(cfg)

    try:
        if workers == 1 or len(todo) <= 1:
            for c in todo:
                cached_run(c, progress=False)
                finished(c)
        else:
            _run_workers(todo, workers, finished, gpus)
    finally:
        bar.close()
    return [runs_root() / run_key(c) for c in configs]


def load_runs(paths, labels=None, steps: int | None = None):
    """One row per (run, step) of the runs in ``paths``: every metric, plus ``run``, ``seed``,
    ``label`` (``labels[i]``, else the run's method spec) and ``method``. ``steps`` keeps the
    first that many steps of each run (a cached run may be longer than asked for)."""
    import pandas as pd


    paths = [Path(p) for p in paths]
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"labels has {len(labels)} entries for {len(paths)} runs")
    frames = []
    for i, run in enumerate(paths):
        cfg = json.loads((run / "config.json").read_text())
        lines = read_metrics(run)[: steps if steps else None]
        if not lines:
            raise ValueError(f"{run} has no metric lines")
        df = pd.DataFrame(lines)
        df["run"], df["seed"], df["method"] = str(run), cfg["seed"], cfg["method"]
        df["label"] = labels[i] if labels is not None else cfg["method"]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
