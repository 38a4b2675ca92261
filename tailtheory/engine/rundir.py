"""Run directories: what ``--out`` may be, who may write it, and what is never deleted.

The rules, checked before anything is written:

1. ``--out`` is a missing or empty directory, or a tailtheory run: one holding the marker file
   :data:`MARKER`. Anything else (a file, a model folder with its own ``config.json``, a
   directory of notes) is refused, and nothing in it is touched.
2. One writer at a time: a run holds an exclusive ``flock`` on ``RUN/.tailtheory-lock`` while it
   runs; a second process gets an error. The lock goes away with its process, however it ends.
3. Nothing of an earlier run is deleted: a fresh run (no ``--resume``) into a run directory that
   holds anything but the marker and the lock is refused; ``--resume`` continues that run.
4. Temporary files that an interrupted atomic write left (``.NAME.XXXX.tmp``) are removed when a
   run starts, under the lock.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tailtheory.core.io import PARTIAL_GLOB, atomic_write_text, remove_partial_writes

MARKER = ".tailtheory-run"
"""File that makes a directory a tailtheory run (its content is informational)."""
LOCK = ".tailtheory-lock"
"""File a running process holds an exclusive ``flock`` on (it holds that process's id)."""
SUBDIRS = ("tokens",)
"""Sub-directories a run writes (atomic writes there get the same clean-up)."""


class RunDirError(ValueError):
    """``--out`` cannot be written by this run; the message says why and what to do."""


class RunInUse(RunDirError):
    """``--out`` is being written by another live process (it holds the run's lock)."""


def is_run(path: str | Path) -> bool:
    """Whether ``path`` is a tailtheory run directory (holds :data:`MARKER`)."""
    return (Path(path) / MARKER).is_file()


def run_contents(run: Path) -> list[str]:
    """Names in ``run`` that belong to a run's output: all but the marker, the lock, the
    leftovers of interrupted writes and sub-directories holding nothing else."""
    if not run.is_dir():
        return []
    return sorted(p.name for p in run.iterdir()
                  if p.name not in (MARKER, LOCK) and not p.match(PARTIAL_GLOB)
                  and not (p.is_dir() and p.name in SUBDIRS and not run_contents(p)))


def check_out(run: Path, resume: bool) -> None:
    """Raise :class:`RunDirError` unless ``run`` may be written under the rules above."""
    if run.exists() and not run.is_dir():
        raise RunDirError(f"--out {run} is a file, not a directory; choose a new or empty "
                          f"directory")
    names = run_contents(run)
    if not is_run(run):
        if "checkpoint.pt" in names:
            raise RunDirError(f"{run} holds a checkpoint but no {MARKER}: a run of an earlier "
                              f"tailtheory, whose checkpoints are not read (their format could "
                              f"run code when loaded); start a new run with another --out")
        if resume:
            raise RunDirError(f"--resume: no checkpoint at {run} (it is not a tailtheory run)")
        if names:
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise RunDirError(f"--out {run} is not a tailtheory run directory (it holds {shown} "
                              f"and no {MARKER}); runs go into a new or empty directory: "
                              f"choose another --out")
    elif names and not resume:
        raise RunDirError(f"{run} already holds a run ({', '.join(names[:4])}"
                          f"{', ...' if len(names) > 4 else ''}); pass --resume to continue it or "
                          f"choose another --out")


@contextmanager
def open_run(out: str | Path, resume: bool) -> Iterator[Path]:
    """Check ``out`` (:func:`check_out`), create it, lock it, mark it as a run and clear the
    leftovers of interrupted writes; yields the run path, and releases the lock on exit."""
    run = Path(out)
    check_out(run, resume)
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot create --out {run}: {exc.strerror or exc}") from None
    with _locked(run):
        check_out(run, resume)  # again: another process may have written it meanwhile
        if not is_run(run):
            atomic_write_text(run / MARKER, "tailtheory run directory\n")
        for d in (run, *(run / s for s in SUBDIRS)):
            remove_partial_writes(d)
        yield run


def wait_for_writer(run: Path) -> None:
    """Block until no process holds ``run``'s lock (returns at once when none does)."""
    if not (run / LOCK).exists():
        return
    fd = os.open(run / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # granted when the writer's process ends or finishes
    finally:
        os.close(fd)


def clear_run(run: Path) -> None:
    """Delete everything in a cached run but its lock file, holding the lock: a process that
    trains into ``run`` meanwhile is waited for, never deleted under (its lock file stays the
    one every process locks)."""
    import shutil

    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for p in run.iterdir():
            if p.name == LOCK:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
    finally:
        os.close(fd)


@contextmanager
def _locked(run: Path) -> Iterator[None]:
    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise RunInUse(f"{run} is in use by another tailtheory process (pid {holder}); "
                              f"wait for it to finish or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock
