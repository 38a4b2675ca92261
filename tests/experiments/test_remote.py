"""What a study's run takes to a worker and brings back (``tailtheory/experiments/remote.py``):
the start's files with their fingerprint, checked before training (a warm start's in the job, a
saved model's folder apart from it or read on the node); a private attempt folder renamed when
done; a record and no write to ``results/``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tailtheory.engine.checkpoint import read_metrics
from tailtheory.engine.config import TrainConfig
from tailtheory.experiments import remote

SMALL = dict(model="tiny", n_people=2, prompts_per_step=2, group_size=2, lr=3e-3, eval_every=1,
             eval_n=4, device="cpu", steps=2)

pytestmark = pytest.mark.usefixtures("one_thread")


def unwritable(tmp_path: Path) -> str:
    """A results folder nobody can create, root included: its parent is a file."""
    (tmp_path / "not_a_folder").write_text("")
    return str(tmp_path / "not_a_folder" / "results")


def test_a_worker_is_shipped_its_start_and_never_builds_or_stores(monkeypatch, tmp_path):
    """A ``warm`` run's warm start travels as bytes with its fingerprint; the worker trains from
    them without finding or training a warm start, cannot write results/, and returns the row
    the driver stores; another fingerprint or package version is refused before training."""
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "cache"))
    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.start import warm_cache
    from tailtheory.engine.tasks.tokenizer import build_tokenizer

    folder = tmp_path / "warm"
    tiny_lm(layers=1).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    monkeypatch.setattr(remote, "warm_start", lambda *a, **k: folder)
    cfg = TrainConfig(**{**SMALL, "model": "warm"})
    job = remote.make_job("A", cfg, lambda run: {"lines": len(read_metrics(run))})
    assert job.start and job.start["config.json"] == (folder / "config.json").read_bytes()

    def no_build(*a, **k):
        raise AssertionError("a worker found or trained a warm start")

    monkeypatch.setattr(remote, "warm_start", no_build)
    monkeypatch.setattr(warm_cache, "warm_start", no_build)
    monkeypatch.setenv("TAILTHEORY_RESULTS", unwritable(tmp_path))
    record = remote.run_job(replace(job, cache=str(tmp_path / "worker")))
    assert record["row"] == {"seed": 0, "lines": 2} and record["attempt"] == 1
    assert record["identity"] == job.identity and record["config"]["model"] == "warm"
    run = tmp_path / "worker" / "runs" / job.key
    assert json.loads((run / "provenance.json").read_text())["weights"] == job.weights
    assert remote.attempts(run.parent, job.key) == []          # renamed when done
    stamp = (run / "metrics.jsonl").stat().st_mtime_ns
    assert remote.run_job(replace(job, cache=str(tmp_path / "worker")))["row"] == record["row"]
    assert (run / "metrics.jsonl").stat().st_mtime_ns == stamp  # found finished: not retrained
    with pytest.raises(remote.RunFailed, match="starting weights here"):
        remote.run_job(replace(job, weights="0" * 16, cache=str(tmp_path / "worker")))
    with pytest.raises(remote.RunFailed, match="driver runs tailtheory 0.0.0"):
        remote.run_job(replace(job, version="0.0.0", cache=str(tmp_path / "w3")))
    # the finished run under the key started elsewhere: not reused; the refused attempt's folder
    # stays, with its log
    assert len(remote.attempts(run.parent, job.key)) == 1


def saved_model(folder: Path) -> Path:
    """A user's checkpoint: a tiny LM and its word-level tokenizer saved in ``folder``, beside a
    file no run reads (an optimizer's state)."""
    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.tasks.tokenizer import build_tokenizer

    tiny_lm(layers=1).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    (folder / "optimizer.pt").write_bytes(b"not shipped")
    return folder


def test_a_folder_model_travels_as_its_files_and_a_changed_folder_is_refused(monkeypatch,
                                                                             tmp_path):
    """``--model PATH``: the driver reads the folder's fingerprints, not its files into each
    job; a worker that cannot see the path (a relative one, from another working directory)
    trains from the files it is given, recording the driver's path and fingerprints as a local
    run does, and finds the run finished when asked again; without the files it reads the path
    (SLURM). Files that are not the driver's (in transit, or the folder changed since the driver
    read it) are refused before training."""
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TAILTHEORY_RESULTS", unwritable(tmp_path))
    from tailtheory.core.models import tiny_lm
    from tailtheory.core.provenance import weights_fingerprint
    from tailtheory.engine.load import load_start

    folder = saved_model(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)                                    # the driver's directory
    cfg = TrainConfig(**{**SMALL, "model": "ckpt"})
    job = remote.make_job("A", cfg, lambda run: {"lines": len(read_metrics(run))})
    assert job.start is None and job.folder == str(folder.resolve())
    assert job.weights == weights_fingerprint(load_start(cfg)[0])
    files = remote.read_model_files(folder)
    assert "optimizer.pt" not in files and "model.safetensors" in files
    away = folder.rename(tmp_path / "elsewhere")                   # the worker cannot see it
    (tmp_path / "node").mkdir()
    monkeypatch.chdir(tmp_path / "node")                           # nor the driver's directory
    record = remote.run_job(replace(job, cache=str(tmp_path / "w1")), files)
    assert record["row"] == {"seed": 0, "lines": 2} and record["config"]["model"] == "ckpt"
    run = tmp_path / "w1" / "runs" / job.key
    prov = json.loads((run / "provenance.json").read_text())
    assert prov["start"] == f"path:{folder.resolve()}" and prov["weights"] == job.weights
    assert prov["checkpoint"] == job.identity["checkpoint"]
    assert json.loads((run / "config.json").read_text())["model"] == "ckpt"
    stamp = (run / "metrics.jsonl").stat().st_mtime_ns
    assert remote.run_job(replace(job, cache=str(tmp_path / "w1")), files) == record
    assert (run / "metrics.jsonl").stat().st_mtime_ns == stamp    # found finished
    with pytest.raises(remote.RunFailed, match="not readable on"):
        remote.run_job(replace(job, cache=str(tmp_path / "w2")))
    away.rename(folder)
    assert remote.run_job(replace(job, cache=str(tmp_path / "w2")))["row"] == record["row"]
    other = {**files, "model.safetensors": b"0" + files["model.safetensors"][1:]}
    with pytest.raises(remote.RunFailed, match="not those the driver read"):
        remote.run_job(replace(job, cache=str(tmp_path / "w3")), other)
    tiny_lm(layers=1, seed=1).save_pretrained(folder)             # the folder changes
    with pytest.raises(remote.RunFailed, match="the folder changed since"):
        remote.run_job(replace(job, cache=str(tmp_path / "w4")))
    assert not (tmp_path / "w3" / "runs" / job.key).exists()


@pytest.mark.cluster
def test_an_element_of_the_array_is_requeued_with_its_runs():
    """On preemption submitit calls ``checkpoint``: the same element, the same runs."""
    pytest.importorskip("submitit")
    element = remote.ArrayElement()
    again = element.checkpoint(["job"])
    assert again.function is element and again.args == (["job"],)
    assert element([]) == []
