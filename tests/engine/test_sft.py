"""Tests of ``tailtheory.engine.sft``: config, data, stopping rule, cache, sampled accuracy.

Only tiny configs run here (seconds); the real warm start (minutes) is the ``slow`` test.
"""

import argparse
import dataclasses
import types
import warnings

import pytest
import torch

from tailtheory.engine import sft
from tailtheory.engine.sft import (IGNORE_INDEX, SFTConfig, config_hash, load_warm_start,
                                   pack_sft_batch, read_record, sampled_accuracy, sft_data,
                                   warm_start)
from tailtheory.engine.tasks import get_task
from tailtheory.core.models import TinyLMConfig, load_lm, tiny_lm

TINY = SFTConfig(task="kk", task_kwargs={"n_people": 2},
                 model=TinyLMConfig(hidden=32, layers=1, heads=2, kv_heads=1),
                 batch_size=16, max_steps=4, eval_every=2, eval_n=32, pool_size=128)
"""A warm start that runs in about a second (it does not reach the window)."""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(sft.CACHE_ENV, str(tmp_path))
    return tmp_path / "sft"


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
    # the time budget bounds a run but does not change a run that finished inside it
    assert config_hash(dataclasses.replace(TINY, max_seconds=1e6)) == config_hash(TINY)


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

@pytest.mark.parametrize("acc, out_of_time, reason", [
    (0.05, False, None), (0.05, True, "max_seconds"), (0.2, False, "window"), (0.2, True, "window"),
    (0.1, False, "window"), (0.7, False, "window"), (0.71, False, "overshoot")])
def test_stop_reason(acc, out_of_time, reason):
    assert sft.stop_reason(acc, 0.1, 0.7, out_of_time) == reason


@pytest.mark.parametrize("accs, stop, steps", [
    ([0.0, 0.3, 0.4], "window", 6), ([0.0, 0.9], "overshoot", 4), ([0.2] * 9, "max_steps", 8)])
def test_stopping_rule(monkeypatch, accs, stop, steps):
    """Two people: guessing scores 0.25, so the window is [0.35, 0.70]; 0.3 is not enough."""
    script = iter(accs)
    monkeypatch.setattr(sft, "sampled_accuracy", lambda *a, **k: next(script))
    cfg = dataclasses.replace(TINY, max_steps=8)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _, _, rec = sft.train_sft(cfg, progress=False)
    assert (rec["stop"], rec["steps"], rec["in_window"]) == (stop, steps, stop == "window")
    assert rec["window"] == [pytest.approx(0.35), 0.70] and rec["chance"] == 0.25
    assert [h["step"] for h in rec["history"]] == list(range(2, steps + 1, 2))
    assert any("outside" in str(x.message) for x in w) == (stop != "window")


# --- the cache ---------------------------------------------------------------------------------

def test_warm_start_tiny_saves_and_caches(cache, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = warm_start(TINY, progress=False)
    assert path == cache / config_hash(TINY)
    rec = read_record(path)
    assert {"steps", "accuracy", "seconds", "stop", "history"} <= set(rec)
    assert rec["steps"] == 4 and 0 <= rec["accuracy"] <= 1 and rec["config"]["task"] == "kk"
    assert sorted(p.name for p in cache.iterdir()) == [path.name]      # no temporary folder left
    model, task = load_warm_start(path, device="cpu")
    assert model.config.vocab_size == len(task.tokenizer) == 512 and task.n_people == 2
    assert torch.equal(load_lm(path, device="cpu").lm_head.weight, model.lm_head.weight)

    calls = []
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: calls.append(1) or 1 / 0)
    assert warm_start(TINY, progress=False) == path and not calls       # cache hit
    with pytest.raises(ZeroDivisionError):
        warm_start(TINY, progress=False, force=True)
    assert calls and read_record(path)["steps"] == 4                    # failed retrain: kept
    assert sorted(p.name for p in cache.iterdir()) == [path.name]


def test_run_cut_short_by_time_is_retrained(cache, monkeypatch):
    cfg = dataclasses.replace(TINY, max_seconds=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = warm_start(cfg, progress=False)
        assert read_record(path)["stop"] == "max_seconds" and read_record(path)["steps"] == 1
        calls = []
        real = sft.train_sft
        monkeypatch.setattr(sft, "train_sft", lambda *a, **k: calls.append(1) or real(*a, **k))
        assert warm_start(cfg, progress=False) == path and calls == [1]


def test_read_record_of_a_non_warm_start(tmp_path):
    with pytest.raises(FileNotFoundError, match="sft.json"):
        read_record(tmp_path)


def test_sft_main(cache, capsys, monkeypatch):
    """The ``tailtheory sft`` options reach the config; the model is shrunk to TINY's."""
    seen = []
    real = sft.warm_start

    def shrunk(cfg, **kw):
        seen.append(cfg)
        return real(dataclasses.replace(TINY, max_steps=cfg.max_steps,
                                        eval_every=cfg.eval_every), **kw)

    monkeypatch.setattr(sft, "warm_start", shrunk)
    p = argparse.ArgumentParser()
    sft.add_sft_arguments(p)
    args = p.parse_args(["--task", "kk", "--n-people", "2", "--steps", "2", "--eval-every", "1",
                         "--seconds", "50", "--quiet", "--threads", str(torch.get_num_threads())])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = sft.sft_main(args)
    cfg = seen[0]
    assert (cfg.task, cfg.task_kwargs, cfg.max_steps, cfg.eval_every, cfg.max_seconds) == (
        "kk", {"n_people": 2}, 2, 1, 50.0)
    out = capsys.readouterr().out
    assert "sampled accuracy" in out and str(cache) in out
    assert rc == (0 if "stop: window" in out else 1)


@pytest.mark.slow
def test_default_warm_start_enters_the_window(cache):
    """The real warm start (minutes on a CPU): kk with 3 people lands inside the window."""
    rec = read_record(warm_start(SFTConfig(), progress=False))
    assert rec["stop"] == "window" and 0.10 <= rec["accuracy"] <= 0.70
