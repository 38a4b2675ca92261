"""Tests of ``tailtheory.engine.start.resume``: a build stopped part-way continues where it
stopped and ends with the weights of a build that never stopped (same machine, same shapes);
a foreign, torn or code-carrying checkpoint is set aside, never continued or run."""

import dataclasses

import pytest
import torch

from tailtheory.core.models import load_lm
from tailtheory.engine.start import corpus_lm as clm
from tailtheory.engine.start import resume, sft, warm_cache
from tailtheory.engine.start.corpus_lm import corpus_lm, read_corpus_record
from tailtheory.engine.start.resume import STATE, Resume, digest, partial_folder
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.start.warm_cache import read_record, warm_start
from tests.engine.start.test_corpus_lm import TINY as TINY_CORPUS
from tests.engine.start.test_sft import TINY as TINY_SFT

CORPUS = dataclasses.replace(TINY_CORPUS, steps=6)
WARM = dataclasses.replace(TINY_SFT, stop_in_window=False, max_steps=4)


class Stopped(Exception):
    """Stands for the process being killed after a checkpoint."""


def _use_cache(monkeypatch, path):
    monkeypatch.setenv(clm.CACHE_ENV, str(path))


def _stop_after(monkeypatch, at: int):
    """Checkpoint after every step and stop the build right after step ``at``'s checkpoint."""
    monkeypatch.setattr(resume, "CHECKPOINT_SECONDS", 0.0)
    real = Resume.maybe_save

    def save_then_stop(self, step, *a, **k):
        wrote = real(self, step, *a, **k)
        if step == at:
            raise Stopped
        return wrote
    monkeypatch.setattr(Resume, "maybe_save", save_then_stop)


def _weights(path):
    return load_lm(path, device="cpu").state_dict()


def _same(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def corpus_whole(tmp_path_factory):
    """The tiny corpus LM built without a stop: what a continued build must equal."""
    mp = pytest.MonkeyPatch()
    mp.setenv(clm.CACHE_ENV, str(tmp_path_factory.mktemp("whole")))
    path = corpus_lm(CORPUS, progress=False)
    yield _weights(path), read_corpus_record(path)
    mp.undo()


def test_a_stopped_corpus_build_continues_to_the_same_weights(tmp_path, monkeypatch,
                                                              corpus_whole):
    _use_cache(monkeypatch, tmp_path)
    with monkeypatch.context() as m:
        _stop_after(m, 4)
        with pytest.raises(Stopped):
            corpus_lm(CORPUS, progress=False)
    final = tmp_path / "corpus_lm" / clm.corpus_key(CORPUS)
    assert not final.exists() and (partial_folder(final) / STATE).exists()
    assert resume.progress(final)["step"] == 4
    path = corpus_lm(CORPUS, progress=False)
    weights, record = corpus_whole
    _same(_weights(path), weights)
    rec = read_corpus_record(path)
    assert rec["resumed_from"] == 4 and "resumed_from" not in record
    assert rec["seconds"] >= rec["train_seconds"] > 0         # both count the first sitting
    assert rec["history"] == record["history"] and rec["heldout_loss"] == record["heldout_loss"]
    assert not partial_folder(final).exists()                          # cleared once saved


@pytest.mark.parametrize("spoil", ["foreign", "torn", "code"])
def test_a_bad_checkpoint_is_set_aside_and_nothing_in_it_runs(spoil, tmp_path):
    state = tmp_path / "key.partial" / STATE
    state.parent.mkdir()
    ran = []
    model = torch.nn.Linear(2, 2)
    if spoil == "foreign":
        torch.save({"identity": "another build", "step": 5, "seconds": 1.0, "history": [],
                    "model": model.state_dict(), "opt": {}, "rng": torch.Generator().get_state(),
                    "sched": None}, state)
    elif spoil == "torn":
        state.write_bytes(b"PK\x03\x04 not a whole checkpoint")
    else:
        class Payload:                                     # unpickling it would call ran.append
            def __reduce__(self):
                return (ran.append, ("ran",))
        torch.save({"identity": "this build", "payload": Payload()}, state)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = Resume(state.parent, "this build", progress=False)
    with pytest.warns(RuntimeWarning, match="starting over"):
        assert r.restore(model, torch.optim.AdamW(model.parameters()), torch.Generator()) == (
            0, [], 0.0)
    assert not ran and r.resumed_from == 0 and not state.parent.exists()
    _same(model.state_dict(), before)


def test_force_discards_a_checkpoint_before_it_trains(tmp_path, monkeypatch):
    _use_cache(monkeypatch, tmp_path)
    final = tmp_path / "corpus_lm" / clm.corpus_key(CORPUS)
    partial_folder(final).mkdir(parents=True)
    (partial_folder(final) / STATE).write_bytes(b"a checkpoint force must not read")
    seen = []

    def train(cfg, progress, threads, checkpoints):
        seen.append(checkpoints.exists())
        raise Stopped
    monkeypatch.setattr(clm, "train_corpus_lm", train)
    with pytest.raises(Stopped):
        corpus_lm(CORPUS, progress=False, force=True)
    assert seen == [False]


def test_a_stopped_warm_start_continues_to_the_same_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(sft, "sampled_accuracy", lambda *a, **k: 0.5)
    monkeypatch.setenv(warm_cache.CACHE_ENV, str(tmp_path / "whole"))
    whole = warm_start(WARM, progress=False)
    monkeypatch.setenv(warm_cache.CACHE_ENV, str(tmp_path / "stopped"))
    with monkeypatch.context() as m:
        _stop_after(m, 2)
        with pytest.raises(Stopped):
            warm_start(WARM, progress=False)
    final = tmp_path / "stopped" / "sft" / config_hash(WARM)
    assert (partial_folder(final) / STATE).exists()
    path = warm_start(WARM, progress=False)
    _same(_weights(path), _weights(whole))
    rec, ref = read_record(path), read_record(whole)
    assert rec["resumed_from"] == 2 and rec["history"] == ref["history"]
    assert rec["steps"] == ref["steps"] == 4 and not partial_folder(final).exists()


def test_no_folder_never_writes_and_bad_every_is_refused(tmp_path):
    r = Resume(None, "id", every=0.0)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    assert r.restore(model, opt, torch.Generator()) == (0, [], 0.0)
    assert not r.maybe_save(1, model, opt, torch.Generator(), [], 0.0)
    with pytest.raises(ValueError, match="every"):
        Resume(tmp_path, "id", every=-1.0)


def test_digest_reads_every_dtype_and_tells_data_apart():
    a = torch.arange(6, dtype=torch.long)
    assert digest(a) == digest(a.clone()) != digest(a + 1)
    assert digest(torch.ones(3, dtype=torch.bfloat16)) != digest(torch.ones(3))
