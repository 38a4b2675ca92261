"""Tests of ``tailtheory.engine.start.warm_cache``: the cache of warm starts and ``tailtheory sft``.

Only tiny configs run here (seconds); the real warm start (minutes) is the ``slow`` test.
"""

import argparse
import dataclasses
import json
import shutil

import pytest
import torch

from tailtheory.core.models import load_lm
from tailtheory.core.provenance import weights_fingerprint
from tailtheory.engine.start import warm_cache
from tailtheory.engine.start.sft import SFTConfig, config_hash
from tailtheory.engine.start.warm_cache import (WarmStartMissed, load_warm_start, read_record,
                                          warm_start)
from tests.engine.start.test_sft import IN_WINDOW, TINY, script_accuracy


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(warm_cache.CACHE_ENV, str(tmp_path))
    return tmp_path / "sft"


def test_warm_start_tiny_saves_and_caches(cache, monkeypatch):
    script_accuracy(monkeypatch, [0.0, IN_WINDOW])
    path = warm_start(TINY, progress=False)
    assert path == cache / config_hash(TINY)
    rec = read_record(path)
    assert {"steps", "accuracy", "seconds", "stop", "history", "usable"} <= set(rec)
    assert rec["steps"] == 4 and rec["usable"] and rec["config"]["task"] == "kk"
    assert sorted(p.name for p in cache.iterdir()) == [path.name]      # no temporary folder left
    model, task = load_warm_start(path, device="cpu")
    assert model.config.vocab_size == len(task.tokenizer) == 512 and task.n_people == 2
    assert torch.equal(load_lm(path, device="cpu").lm_head.weight, model.lm_head.weight)

    calls = []
    monkeypatch.setattr(warm_cache, "train_sft", lambda *a, **k: calls.append(1) or 1 / 0)
    assert warm_start(TINY, progress=False) == path and not calls       # cache hit
    # a usable result is found whatever the budget of the call (the budget is not in the key)
    assert warm_start(dataclasses.replace(TINY, max_steps=2), progress=False) == path
    with pytest.raises(ZeroDivisionError):
        warm_start(TINY, progress=False, force=True)
    assert calls and read_record(path)["steps"] == 4                    # failed retrain: kept
    assert sorted(p.name for p in cache.iterdir()) == [path.name]


def test_missed_window_is_kept_unusable_and_refused(cache, monkeypatch):
    """A run that ends below the window is saved for inspection, marked unusable, and raises
    with the command to run; the same budget again raises at once (no retraining), a larger
    budget retrains, and a miss never replaces a usable result."""
    script_accuracy(monkeypatch, [0.0])
    with pytest.raises(WarmStartMissed, match=r"missed its accuracy window.*after 4 steps.*"
                                              r"tailtheory sft --task kk --n-people 2 --eval-every 2 --steps 8"):
        warm_start(TINY, progress=False)
    path = cache / config_hash(TINY)
    rec = read_record(path)
    assert (rec["usable"], rec["stop"], rec["steps"]) == (False, "max_steps", 4)

    calls = []
    real = warm_cache.train_sft
    monkeypatch.setattr(warm_cache, "train_sft", lambda *a, **k: calls.append(1) or real(*a, **k))
    with pytest.raises(WarmStartMissed, match="not used"):
        warm_start(TINY, progress=False)
    assert calls == []                                                  # same budget: same miss
    script_accuracy(monkeypatch, [0.0, 0.0, 0.0, IN_WINDOW])
    assert warm_start(dataclasses.replace(TINY, max_steps=8), progress=False) == path
    assert calls == [1] and read_record(path)["usable"] and read_record(path)["steps"] == 8
    script_accuracy(monkeypatch, [0.0])
    with pytest.raises(WarmStartMissed):
        warm_start(TINY, progress=False, force=True)
    assert read_record(path)["usable"]                                  # the good one is kept


def test_overshoot_says_evaluate_more_often(cache, monkeypatch):
    script_accuracy(monkeypatch, [0.0, 0.9])
    with pytest.raises(WarmStartMissed, match="overshot.*--eval-every 1"):
        warm_start(TINY, progress=False)


def test_train_refuses_a_missed_warm_start(cache, monkeypatch, tmp_path, capsys):
    """``tailtheory train --model warm`` on a warm start that missed its window: one line saying
    what to do, exit status 2, and no run written."""
    from tailtheory.cli import main

    script_accuracy(monkeypatch, [0.0])
    monkeypatch.setattr(SFTConfig, "__init__", _shrunk_init(SFTConfig.__init__))
    out = tmp_path / "run"
    rc = main(["train", "--task", "kk", "--n-people", "2", "--model", "warm", "--steps", "1",
               "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "missed its accuracy window" in err and "tailtheory sft" in err
    assert "Traceback" not in err and not (out / "metrics.jsonl").exists()


def _shrunk_init(init):
    """``SFTConfig.__init__`` with TINY's sizes, so the warm start of ``train`` takes a second."""
    small = {f.name: getattr(TINY, f.name) for f in dataclasses.fields(TINY)
             if f.name not in ("task", "task_kwargs")}

    def wrapped(self, task="kk", task_kwargs=None, **kw):
        init(self, task=task, task_kwargs=task_kwargs or {}, **{**small, **kw})

    return wrapped


def test_read_record_of_a_non_warm_start(tmp_path):
    with pytest.raises(FileNotFoundError, match="sft.json"):
        read_record(tmp_path)


def test_sft_main(cache, capsys, monkeypatch):
    """The ``tailtheory sft`` options reach the config; the model is shrunk to TINY's."""
    seen = []
    real = warm_cache.warm_start

    def shrunk(cfg, **kw):
        seen.append((cfg, kw))
        return real(dataclasses.replace(TINY, max_steps=cfg.max_steps,
                                        eval_every=cfg.eval_every), **kw)

    monkeypatch.setattr(warm_cache, "warm_start", shrunk)
    p = argparse.ArgumentParser()
    warm_cache.add_sft_arguments(p)
    script_accuracy(monkeypatch, [IN_WINDOW])
    args = p.parse_args(["--task", "kk", "--n-people", "2", "--steps", "2", "--eval-every", "1",
                         "--quiet", "--threads", "1"])
    assert warm_cache.sft_main(args) == 0
    cfg, kw = seen[0]
    assert (cfg.task, cfg.task_kwargs, cfg.max_steps, cfg.eval_every, kw["threads"]) == (
        "kk", {"n_people": 2}, 2, 1, 1)
    out = capsys.readouterr().out
    assert "sampled accuracy" in out and "stop: window" in out and str(cache) in out

    script_accuracy(monkeypatch, [0.0])
    args = p.parse_args(["--task", "kk", "--n-people", "2", "--steps", "2", "--eval-every", "1",
                         "--quiet", "--force"])
    assert warm_cache.sft_main(args) == 1
    assert "missed its accuracy window" in capsys.readouterr().err


def test_sft_main_three_people_is_the_default_task(monkeypatch):
    """``--n-people 3`` is the warm start ``train`` uses (same cache key as no flag)."""
    p = argparse.ArgumentParser()
    warm_cache.add_sft_arguments(p)
    seen = []

    def record(cfg, **kw):
        seen.append(cfg)
        raise WarmStartMissed("not trained here")

    monkeypatch.setattr(warm_cache, "warm_start", record)
    assert warm_cache.sft_main(p.parse_args(["--n-people", "3", "--quiet"])) == 1
    assert config_hash(seen[0]) == config_hash(SFTConfig())


@pytest.mark.slow
def test_default_warm_start_enters_the_window(cache):
    """The real warm start (minutes on a CPU): kk with 3 people lands inside the window."""
    rec = read_record(warm_start(SFTConfig(), progress=False))
    assert rec["stop"] == "window" and 0.10 <= rec["accuracy"] <= 0.70


# --- committed warm starts ---------------------------------------------------------------------

def test_each_committed_warm_start_matches_its_fingerprint_and_the_readme():
    readme = (warm_cache.COMMITTED / "README.md").read_text()
    folders = sorted(p.parent for p in warm_cache.COMMITTED.glob("*/sft.json"))
    assert folders, "no committed warm start"
    total = sum(f.stat().st_size for d in folders for f in d.iterdir())
    assert total <= 30e6
    for d in folders:
        rec = read_record(d)
        assert weights_fingerprint(load_lm(d, device="cpu").float()) == rec["weights"]
        assert rec["hash"] in readme and rec["weights"] in readme and rec["usable"]


def test_a_committed_warm_start_is_adopted_and_a_damaged_one_refused(cache, monkeypatch,
                                                                     tmp_path):
    from tailtheory.engine.start.rungs import rung

    cfg = rung("base").warm(build=1)
    src = warm_cache.committed(cfg)
    assert src is not None and src.name == "base.b1"
    monkeypatch.setattr(warm_cache, "train_sft", lambda *a, **k: pytest.fail("trained"))
    path = warm_start(cfg, progress=False)
    assert path == cache / config_hash(cfg) and read_record(path) == read_record(src)
    assert torch.equal(load_lm(path, device="cpu").lm_head.weight,
                       load_lm(src, device="cpu").lm_head.weight)
    # a copy whose record names other weights is refused, and nothing lands in the cache
    fake = tmp_path / "weights" / "base.b1"
    shutil.copytree(src, fake)
    rec = read_record(fake)
    (fake / "sft.json").write_text(json.dumps({**rec, "weights": "0" * 16}))
    monkeypatch.setattr(warm_cache, "COMMITTED", tmp_path / "weights")
    monkeypatch.setenv(warm_cache.CACHE_ENV, str(tmp_path / "other"))
    with pytest.raises(ValueError, match="does not match its fingerprint"):
        warm_start(cfg, progress=False)
    assert not (tmp_path / "other" / "sft" / config_hash(cfg)).exists()


def test_two_processes_adopting_one_committed_warm_start_at_once(cache, monkeypatch):
    """Two runs starting together on an empty cache: the second to rename its copy keeps the
    first's folder instead of failing (it once failed with 'Directory not empty')."""
    from tailtheory.engine.start.rungs import rung

    cfg = rung("base").warm(build=1)
    src = warm_cache.committed(cfg)
    final = cache / config_hash(cfg)
    copy = shutil.copytree

    def copy_while_another_finishes(a, b, **kw):
        copy(src, final)  # the other process's copy lands while ours is being written
        return copy(a, b, **kw)

    monkeypatch.setattr(warm_cache.shutil, "copytree", copy_while_another_finishes)
    monkeypatch.setattr(warm_cache, "train_sft", lambda *a, **k: pytest.fail("trained"))
    assert warm_start(cfg, progress=False) == final
    assert read_record(final) == read_record(src)
    assert sorted(p.name for p in cache.iterdir()) == [final.name]  # no temporary left behind


def test_a_failed_rename_without_a_finished_copy_is_raised(tmp_path):
    tmp, final = tmp_path / "tmp", tmp_path / "final"
    tmp.mkdir()
    (tmp / "sft.json").write_text("{}")
    (final / "half").mkdir(parents=True)  # something there, but not a finished warm start
    with pytest.raises(OSError):
        warm_cache._rename_into(tmp, final)
