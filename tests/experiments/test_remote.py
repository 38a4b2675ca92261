"""What a study's run takes to a worker and brings back (``tailtheory/experiments/remote.py``):
the start's weights with their fingerprint, checked before training; a private attempt folder
renamed when done; a record and no write to ``results/``."""

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
    with pytest.raises(ValueError, match="cannot leave this machine"):
        remote.make_job("A", replace(cfg, model=str(folder)), lambda run: {})




@pytest.mark.cluster
def test_an_element_of_the_array_is_requeued_with_its_runs():
    """On preemption submitit calls ``checkpoint``: the same element, the same runs."""
    pytest.importorskip("submitit")
    element = remote.ArrayElement()
    again = element.checkpoint(["job"])
    assert again.function is element and again.args == (["job"],)
    assert element([]) == []
