"""Tests of ``tailtheory.engine.start.sft``: config, data, stopping rule, sampled accuracy.

Only tiny configs run here (seconds); the cache of warm starts is ``test_warm_cache.py``.
"""

import dataclasses
import types

import pytest
import torch

from tailtheory.core.models import TinyLMConfig, tiny_lm
from tailtheory.engine.start import sft
from tailtheory.engine.start.sft import (IGNORE_INDEX, SFTConfig, config_hash, pack_sft_batch,
                                   sampled_accuracy, sft_data)
from tailtheory.engine.tasks.task import get_task

TINY = SFTConfig(task="kk", task_kwargs={"n_people": 2},
                 model=TinyLMConfig(hidden=32, layers=1, heads=2, kv_heads=1),
                 batch_size=16, max_steps=4, eval_every=2, eval_n=32, pool_size=128)
"""A warm start that runs in about a second (it does not reach the window on its own)."""


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
    monkeypatch.setattr(sft, "sft_loop", lambda cfg, model, task, device, *a:
                        (model, None, {"threads": torch.get_num_threads()}))
    before = torch.get_num_threads()
    for threads, used in ((0, 1), (1, 1), (3, 3)):
        assert sft.train_sft(TINY, progress=False, threads=threads)[2]["threads"] == used
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        sft.train_sft(TINY, progress=False, threads=-1)


# --- a warm start from the pretrained corpus LM -------------------------------------------

def test_pretrained_warm_start_speaks_the_corpus_tokenizer(tmp_path, monkeypatch):
    """``pretrained``: training starts from the corpus LM's very weights, the task speaks its BPE
    tokenizer, and the cache key follows the corpus LM's config; a model other than its is
    refused."""
    from tailtheory.core.provenance import weights_fingerprint
    from tailtheory.engine.start import corpus_lm as clm
    from tests.engine.start.test_corpus_lm import TINY as TINY_CORPUS

    monkeypatch.setenv(clm.CACHE_ENV, str(tmp_path))
    cfg = dataclasses.replace(TINY, task="kk_prose", pretrained=TINY_CORPUS,
                              model=TINY_CORPUS.model)
    model, task = cfg.start()
    corpus_model, tokenizer = clm.load_corpus_lm(clm.corpus_lm(TINY_CORPUS, progress=False))
    assert weights_fingerprint(model) == weights_fingerprint(corpus_model)
    assert task.tokenizer.get_vocab() == tokenizer.get_vocab() and task.vocab_size == 384
    assert task.reward(task.problems(1)[0], task.target_ids(task.problems(1)[0])).correct
    other = dataclasses.replace(TINY_CORPUS, steps=4)
    assert config_hash(cfg) != config_hash(dataclasses.replace(cfg, pretrained=other,
                                                               model=other.model))
    assert config_hash(cfg) != config_hash(dataclasses.replace(cfg, pretrained=None))
    with pytest.raises(ValueError, match="pretrained corpus LM's model"):
        dataclasses.replace(cfg, model=TINY.model)
