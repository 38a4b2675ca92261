"""Tests of ``tailtheory.engine.sft``: config, data, stopping rule, cache, sampled accuracy.

Only tiny configs run here (seconds); the real warm start (minutes) is the ``slow`` test.
"""

import argparse
import dataclasses
import types

import pytest
import torch

from tailtheory.engine import sft
from tailtheory.engine.sft import (IGNORE_INDEX, SFTConfig, WarmStartMissed, config_hash,
                                   load_warm_start, pack_sft_batch, read_record, sampled_accuracy,
                                   sft_data, warm_start)
from tailtheory.engine.tasks import get_task
from tailtheory.core.models import TinyLMConfig, load_lm, tiny_lm

TINY = SFTConfig(task="kk", task_kwargs={"n_people": 2},
                 model=TinyLMConfig(hidden=32, layers=1, heads=2, kv_heads=1),
                 batch_size=16, max_steps=4, eval_every=2, eval_n=32, pool_size=128)
"""A warm start that runs in about a second (it does not reach the window on its own)."""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(sft.CACHE_ENV, str(tmp_path))
    return tmp_path / "sft"


def script_accuracy(monkeypatch, accs):
    """Make the held-out evaluations return ``accs`` in turn (then the last one forever)."""
    accs = list(accs)
    monkeypatch.setattr(sft, "sampled_accuracy", lambda *a, **k: accs.pop(0) if len(accs) > 1
                        else accs[0])


IN_WINDOW = 0.5
"""A scripted accuracy inside TINY's window [0.35, 0.70]."""


# --- config ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    (dict(task="sudoku"), "task"), (dict(batch_size=0), "batch_size"),
    (dict(eval_every=0), "eval_every"), (dict(acc_low=0.8, acc_high=0.7), "acc_low"),
    (dict(acc_high=1.5), "acc_high"), (dict(lr=0.0), "lr"), (dict(temperature=-1.0), "temperature"),
    (dict(train_seed=3, eval_seed=3), "train_seed"), (dict(weight_decay=-0.1), "weight_decay"),
    (dict(task_kwargs={"n_people": 9}), "n_people"), (dict(task_kwargs={"colour": 1}), "colour"),
    (dict(chance_margin=1.0), "chance_margin"),
    (dict(task_kwargs={"n_people": 2}, acc_high=0.3), "empty")])
def test_config_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        SFTConfig(**kw)


def test_config_hash_is_stable_and_sensitive():
    assert config_hash(TINY) == config_hash(dataclasses.replace(TINY))
    assert len({config_hash(TINY), config_hash(dataclasses.replace(TINY, lr=2e-3)),
                config_hash(dataclasses.replace(TINY, task_kwargs={"n_people": 3})),
                config_hash(dataclasses.replace(TINY, model=TinyLMConfig(hidden=64)))}) == 4
    # the step budget bounds a run but does not change a run that finished inside it
    assert config_hash(dataclasses.replace(TINY, max_steps=10**6)) == config_hash(TINY)
    assert "max_seconds" not in {f.name for f in dataclasses.fields(SFTConfig)}


# --- data --------------------------------------------------------------------------------------

def test_pack_sft_batch_labels_only_the_response():
    task = get_task("chain_sum")
    probs = task.problems(8, seed=1)
    X, Y = pack_sft_batch(task, probs)                                       # (N, L)
    for i, p in enumerate(probs):
        n, target = len(p.prompt_ids), task.target_ids(p)
        assert X[i, :n].tolist() == p.prompt_ids
        assert X[i, n:n + len(target)].tolist() == Y[i, n:n + len(target)].tolist() == target
        assert (Y[i, :n] == IGNORE_INDEX).all() and (Y[i, n + len(target):] == IGNORE_INDEX).all()
        assert (X[i, n + len(target):] == task.pad_id).all()


def test_training_pool_excludes_held_out_prompts():
    X, Y, held_out = sft_data(TINY, TINY.make_task())
    first_label = (Y != IGNORE_INDEX).long().argmax(1)                      # (N,)
    train = {tuple(X[i, :n].tolist()) for i, n in enumerate(first_label.tolist())}
    held = {tuple(p.prompt_ids) for p in held_out}
    assert len(train) > 10 and len(held) > 10 and not train & held


def test_no_training_problem_left_is_an_error(monkeypatch):
    task = TINY.make_task()
    same = task.problems(4, seed=1)
    monkeypatch.setattr(task, "problems", lambda n, seed=None: same)
    with pytest.raises(ValueError, match="held-out"):
        sft_data(TINY, task)


# --- sampled accuracy --------------------------------------------------------------------------

class Oracle(torch.nn.Module):
    """A fake causal LM that puts logit ``margin`` on the target token of each known prompt
    (``wrong`` prompts get their answer's first word flipped). Works with the KV-cache calls of
    the rollout engine by keeping the sequence so far as its "cache"."""

    def __init__(self, task, problems, wrong=(), margin=40.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.config = types.SimpleNamespace(vocab_size=task.vocab_size)
        self.task, self.margin = task, margin
        self.targets = {}
        for i, p in enumerate(problems):
            t = task.target_ids(p)
            if i in wrong:
                t = [task.encode("F" if p.answer[0] == "T" else "T")[0]] + t[1:]
            self.targets[tuple(p.prompt_ids)] = t

    def forward(self, input_ids, attention_mask, position_ids=None, past_key_values=None,
                use_cache=False):
        seq = input_ids if past_key_values is None else torch.cat([past_key_values, input_ids], 1)
        logits = torch.zeros(seq.shape[0], input_ids.shape[1], self.config.vocab_size)
        for b, row in enumerate(seq.tolist()):
            row = [t for t in row if t != self.task.pad_id]
            for plen in range(len(row), 0, -1):
                if tuple(row[:plen]) in self.targets:
                    target = self.targets[tuple(row[:plen])]
                    logits[b, -1, target[min(len(row) - plen, len(target) - 1)]] = self.margin
                    break
        return types.SimpleNamespace(logits=logits, past_key_values=seq)


def test_sampled_accuracy_counts_correct_samples():
    task = get_task("kk", n_people=2)
    probs = task.problems(20, seed=9)
    assert sampled_accuracy(Oracle(task, probs), task, probs) == 1.0
    assert sampled_accuracy(Oracle(task, probs, wrong=range(0, 20, 4)), task, probs) == 0.75


def test_sampled_accuracy_of_an_untrained_model_is_near_zero():
    """A random model over 512 tokens almost never writes ``T F <eos>`` by chance."""
    task = get_task("kk", n_people=2)
    model = tiny_lm(TINY.model, seed=0)
    assert sampled_accuracy(model, task, task.problems(64, seed=9)) <= 0.05


# --- stopping rule (accuracy scripted) ---------------------------------------------------------

@pytest.mark.parametrize("acc, reason", [
    (0.05, None), (0.2, "window"), (0.1, "window"), (0.7, "window"), (0.71, "overshoot")])
def test_stop_reason(acc, reason):
    assert sft.stop_reason(acc, 0.1, 0.7) == reason


@pytest.mark.parametrize("accs, stop, steps", [
    ([0.0, 0.3, 0.4], "window", 6), ([0.0, 0.9], "overshoot", 4), ([0.2] * 9, "max_steps", 8)])
def test_stopping_rule(monkeypatch, accs, stop, steps):
    """Two people: guessing scores 0.25, so the window is [0.35, 0.70]; 0.3 is not enough."""
    script = iter(accs)
    monkeypatch.setattr(sft, "sampled_accuracy", lambda *a, **k: next(script))
    cfg = dataclasses.replace(TINY, max_steps=8)
    _, _, rec = sft.train_sft(cfg, progress=False)
    assert (rec["stop"], rec["steps"], rec["in_window"]) == (stop, steps, stop == "window")
    assert rec["usable"] == (stop == "window")
    assert rec["window"] == [pytest.approx(0.35), 0.70] and rec["chance"] == 0.25
    assert [h["step"] for h in rec["history"]] == list(range(2, steps + 1, 2))


def test_small_model_trains_on_one_thread_and_restores_the_count(monkeypatch):
    """The tiny model trains on one CPU thread unless told otherwise; the caller's count is back
    afterwards. (Training itself is replaced: two threads on a busy test machine are slow.)"""
    monkeypatch.setattr(sft, "_train_sft", lambda cfg, model, device, progress:
                        (model, None, {"threads": torch.get_num_threads()}))
    before = torch.get_num_threads()
    for threads, used in ((0, 1), (1, 1), (3, 3)):
        assert sft.train_sft(TINY, progress=False, threads=threads)[2]["threads"] == used
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        sft.train_sft(TINY, progress=False, threads=-1)


# --- the cache ---------------------------------------------------------------------------------

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
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: calls.append(1) or 1 / 0)
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
    real = sft.train_sft
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: calls.append(1) or real(*a, **k))
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
    monkeypatch.setattr(sft.SFTConfig, "__init__", _shrunk_init(sft.SFTConfig.__init__))
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
    real = sft.warm_start

    def shrunk(cfg, **kw):
        seen.append((cfg, kw))
        return real(dataclasses.replace(TINY, max_steps=cfg.max_steps,
                                        eval_every=cfg.eval_every), **kw)

    monkeypatch.setattr(sft, "warm_start", shrunk)
    p = argparse.ArgumentParser()
    sft.add_sft_arguments(p)
    script_accuracy(monkeypatch, [IN_WINDOW])
    args = p.parse_args(["--task", "kk", "--n-people", "2", "--steps", "2", "--eval-every", "1",
                         "--quiet", "--threads", "1"])
    assert sft.sft_main(args) == 0
    cfg, kw = seen[0]
    assert (cfg.task, cfg.task_kwargs, cfg.max_steps, cfg.eval_every, kw["threads"]) == (
        "kk", {"n_people": 2}, 2, 1, 1)
    out = capsys.readouterr().out
    assert "sampled accuracy" in out and "stop: window" in out and str(cache) in out

    script_accuracy(monkeypatch, [0.0])
    args = p.parse_args(["--task", "kk", "--n-people", "2", "--steps", "2", "--eval-every", "1",
                         "--quiet", "--force"])
    assert sft.sft_main(args) == 1
    assert "missed its accuracy window" in capsys.readouterr().err


def test_sft_main_three_people_is_the_default_task(monkeypatch):
    """``--n-people 3`` is the warm start ``train`` uses (same cache key as no flag)."""
    p = argparse.ArgumentParser()
    sft.add_sft_arguments(p)
    seen = []

    def record(cfg, **kw):
        seen.append(cfg)
        raise WarmStartMissed("not trained here")

    monkeypatch.setattr(sft, "warm_start", record)
    assert sft.sft_main(p.parse_args(["--n-people", "3", "--quiet"])) == 1
    assert config_hash(seen[0]) == config_hash(SFTConfig())


@pytest.mark.slow
def test_default_warm_start_enters_the_window(cache):
    """The real warm start (minutes on a CPU): kk with 3 people lands inside the window."""
    rec = read_record(warm_start(SFTConfig(), progress=False))
    assert rec["stop"] == "window" and 0.10 <= rec["accuracy"] <= 0.70
