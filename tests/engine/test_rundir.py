"""Run directories (``tailtheory/engine/rundir.py``): what ``--out`` may be, one writer at a time,
nothing of an earlier run deleted, leftovers of interrupted writes cleaned up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tailtheory.engine import trainer
from tailtheory.engine.checkpoint import CHECKPOINT, METRICS, read_metrics
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rundir import LOCK, MARKER, RunDirError, is_run, open_run
from tailtheory.engine.trainer import train
from tests.engine.test_trainer import SMALL, DenseKK, no_time


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("resume", [False, True])
def test_out_that_is_a_file_is_refused(tmp_path, resume):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(RunDirError, match="is a file, not a directory"):
        with open_run(f, resume):
            pass
    assert f.read_text() == "mine"


def test_model_folder_is_refused_and_left_untouched(tmp_path):
    """A Hugging Face model folder (its own ``config.json``) is not a run: refused, unchanged."""
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"\1\2\3")
    before = _snapshot(model)
    for resume in (False, True):
        with pytest.raises(RunDirError, match="not a tailtheory run|no checkpoint"):
            with open_run(model, resume):
                pass
    assert _snapshot(model) == before and sorted(p.name for p in model.iterdir()) == [
        "config.json", "model.safetensors"]


@pytest.mark.parametrize("make", [False, True])
def test_missing_or_empty_directory_becomes_a_run(tmp_path, make):
    out = tmp_path / "a" / "b"
    if make:
        out.mkdir(parents=True)
    with open_run(out, resume=False) as run:
        assert run == out and is_run(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, LOCK])
    with open_run(out, resume=False):  # nothing written yet: a fresh run may still use it
        pass


def test_one_writer_at_a_time(tmp_path):
    out = tmp_path / "run"
    with open_run(out, resume=False):
        with pytest.raises(RunDirError, match="in use by another tailtheory process"):
            with open_run(out, resume=True):
                pass
    with open_run(out, resume=False):  # released on exit
        pass
    with pytest.raises(KeyError):
        with open_run(out, resume=False):
            raise KeyError("crash")
    with open_run(out, resume=False):  # released when the block raised
        pass


def test_lock_held_by_another_process(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom tailtheory.engine.rundir import open_run\n"
         f"with open_run({str(out)!r}, False):\n print('locked', flush=True)\n sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match=f"pid {holder.pid}"):
            with open_run(out, resume=False):
                pass
    finally:
        holder.communicate("")
    with open_run(out, resume=False):  # the process is gone, and so is its lock
        pass


def test_fresh_run_never_deletes_an_earlier_one(tmp_path):
    """A run killed before its first checkpoint: a fresh run into it is refused (its metrics
    and token dumps stay as they are); ``--resume`` continues it."""
    out = tmp_path / "run"
    with open_run(out, resume=False):
        (out / METRICS).write_text('{"step": 0}\n')
        (out / "tokens").mkdir()
        (out / "tokens" / "step_000000.parquet").write_bytes(b"old")
    before = _snapshot(out)
    with pytest.raises(RunDirError, match="already holds a run.*--resume"):
        with open_run(out, resume=False):
            pass
    assert _snapshot(out) == before
    with open_run(out, resume=True):
        pass


def test_leftovers_of_interrupted_writes_are_removed(tmp_path):
    out = tmp_path / "run"
    with open_run(out, resume=False):
        pass
    (out / "tokens").mkdir()
    stale = [out / f".{CHECKPOINT}.k3j2.tmp", out / ".metrics.jsonl.x.tmp",
             out / "tokens" / ".step_000001.parquet.y.tmp"]
    for p in stale:
        p.write_bytes(b"partial")
    assert [p.name for p in out.iterdir() if p.name not in (MARKER, LOCK)] != []
    with open_run(out, resume=False):  # leftovers (and an empty tokens/) are no earlier output
        assert not any(p.exists() for p in stale)
    (out / "keep.tmp").write_text("not ours")  # not the name of an atomic write
    with open_run(out, resume=True):
        assert (out / "keep.tmp").exists()


def test_train_into_a_run_killed_before_its_first_checkpoint(tmp_path, monkeypatch):
    """Killed at step 1 with no checkpoint written: a fresh ``train`` is refused, ``--resume``
    starts again at step 0 and writes the lines of an uninterrupted run."""
    cfg = TrainConfig(**SMALL, steps=2, checkpoint_every=50, out=str(tmp_path / "run"))
    real_step = trainer.train_step

    def killed_at_1(step, *args, **kw):
        if step == 1:
            raise KeyboardInterrupt
        return real_step(step, *args, **kw)

    monkeypatch.setattr(trainer, "train_step", killed_at_1)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, progress=False, task=DenseKK())
    monkeypatch.setattr(trainer, "train_step", real_step)
    assert not (Path(cfg.out) / CHECKPOINT).exists() and len(read_metrics(cfg.out)) == 1
    with pytest.raises(RunDirError, match="already holds a run"):
        train(cfg, progress=False, task=DenseKK())
    assert len(read_metrics(cfg.out)) == 1
    train(cfg, resume=True, progress=False, task=DenseKK())
    straight = TrainConfig(**SMALL, steps=2, checkpoint_every=50, out=str(tmp_path / "straight"))
    train(straight, progress=False, task=DenseKK())
    assert no_time(read_metrics(cfg.out)) == no_time(read_metrics(straight.out))
    assert json.loads((Path(cfg.out) / "config.json").read_text())["steps"] == 2


def test_resume_of_a_checkpointless_run_with_another_config_is_refused(tmp_path):
    out = tmp_path / "run"
    with open_run(out, resume=False):
        (out / "config.json").write_text(json.dumps(TrainConfig(**SMALL).to_dict()))
    with pytest.raises(ValueError, match="started by a different config.*lr"):
        train(TrainConfig(**{**SMALL, "lr": 0.5}, steps=1, out=str(out)), resume=True,
              progress=False, task=DenseKK())


def test_run_of_an_earlier_version_is_named_as_such(tmp_path):
    """A directory with a checkpoint but no marker (written before runs were marked) is neither
    overwritten nor loaded; the message says what it is."""
    old = tmp_path / "old"
    old.mkdir()
    (old / CHECKPOINT).write_bytes(b"old format")
    for resume in (False, True):
        with pytest.raises(RunDirError, match="a run of an earlier tailtheory"):
            with open_run(old, resume):
                pass
    assert sorted(p.name for p in old.iterdir()) == [CHECKPOINT]


def test_a_cached_run_being_trained_is_waited_for_never_deleted_under(tmp_path):
    """The run cache clears a stale run only holding its lock, and keeps the lock file: two
    processes asking for one cached run (a notebook beside a worker) never write into one folder
    (their steps interleaved before: 0, 1, 0, 2, 1, ...)."""
    import fcntl
    import os
    import threading
    import time

    from tailtheory.engine.rundir import clear_run, wait_for_writer

    run = tmp_path / "run"
    run.mkdir()
    (run / "tokens").mkdir()
    (run / "config.json").write_text("{}")
    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)                     # a writer holds the run
    threading.Timer(0.4, os.close, (fd,)).start()      # ... and finishes 0.4 s later
    t0 = time.perf_counter()
    wait_for_writer(run)
    assert time.perf_counter() - t0 >= 0.3
    clear_run(run)
    assert sorted(p.name for p in run.iterdir()) == [LOCK]
    wait_for_writer(tmp_path)                          # no lock file: returns at once
