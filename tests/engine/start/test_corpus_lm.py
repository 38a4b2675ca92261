"""Tests of ``tailtheory.engine.start.corpus_lm``: config, corpus selection, BPE, cache, loading.

Only a tiny config runs here (seconds, in a temporary cache); the real pretraining (minutes) is
what ``corpus_lm()`` does with the default config.
"""

import dataclasses
import os

import pytest
import torch

from tailtheory.core.models import TinyLMConfig
from tailtheory.engine.start import corpus_lm as clm
from tailtheory.engine.start.corpus_lm import (EOT, PAD, CorpusLMConfig, corpus_files, corpus_lm,
                                         encode_stream, heldout_batch, heldout_stream,
                                         load_corpus_lm, read_corpus_record, train_tokenizer)

TINY = CorpusLMConfig(corpus_bytes=60_000, steps=3, batch_size=4, seq_len=32, warmup=1,
                      eval_every=2, eval_windows=4,
                      model=TinyLMConfig(vocab_size=384, hidden=32, layers=1, heads=2, kv_heads=1,
                                         max_positions=64))
"""A corpus LM that tokenises and trains in a few seconds (it learns next to nothing)."""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(clm.CACHE_ENV, str(tmp_path))
    return tmp_path / "corpus_lm"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    """One tiny corpus LM for the module's read-only tests."""
    mp = pytest.MonkeyPatch()
    mp.setenv(clm.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
    yield corpus_lm(TINY, progress=False)
    mp.undo()


@pytest.mark.parametrize("kw, match", [
    (dict(corpus_bytes=0), "corpus_bytes"), (dict(steps=0), "steps"),
    (dict(heldout_every=1), "heldout_every"), (dict(seq_len=1), "seq_len"),
    (dict(seq_len=512), "max_positions"), (dict(lr=0.0), "lr"), (dict(weight_decay=-1.0), "lr"),
    (dict(model=TinyLMConfig(vocab_size=256)), "vocab_size"), (dict(warmup=-1), "warmup"),
    (dict(batch_size=2.5), "batch_size")])
def test_config_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        CorpusLMConfig(**kw)


def test_corpus_lm_refuses_a_non_config(cache):
    with pytest.raises(TypeError, match="CorpusLMConfig"):
        corpus_lm({"steps": 3})


def test_corpus_files_deterministic_disjoint_and_within_rules():
    train, held = corpus_files(TINY)
    assert (train, held) == corpus_files(TINY)
    assert held and train and not set(train) & set(held)
    chosen = held + train
    assert sum(p.stat().st_size for p in chosen) >= TINY.corpus_bytes
    assert all(p.suffix == ".py" and p.stat().st_size <= clm.MAX_FILE_BYTES for p in chosen)
    root = clm.stdlib_dir()
    assert not any(clm.EXCLUDED_DIRS & set(p.relative_to(root).parts[:-1]) for p in chosen)
    # a larger budget extends the same order: the small corpus is a prefix of the large one
    big_train, big_held = corpus_files(dataclasses.replace(TINY, corpus_bytes=200_000))
    assert set(train) <= set(big_train) and set(held) <= set(big_held)


def test_corpus_too_small_is_a_clear_error(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="corpus_bytes"):
        corpus_files(TINY, root=tmp_path)


def test_bpe_round_trips_and_puts_specials_first():
    text = "def f(x):\n    return x + 1  # caf\u00e9\n\tpass\n"
    tok = train_tokenizer([text * 20], 300)
    assert tok.convert_tokens_to_ids([EOT, PAD]) == [0, 1]
    assert tok.decode(tok.encode(text)) == text
    stream = encode_stream(tok, [text, text])
    assert stream.dtype == torch.long and int((stream == 0).sum()) == 2 and int(stream[-1]) == 0


def test_corpus_lm_cache_layout_and_record(tiny_path):
    names = set(os.listdir(tiny_path))
    assert {"config.json", "model.safetensors", "tokenizer.json", clm.RECORD,
            clm.HELDOUT} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)
    rec = read_corpus_record(tiny_path)
    assert rec["config"] == dataclasses.asdict(TINY) and rec["hash"] == tiny_path.name
    assert rec["heldout_ppl"] == pytest.approx(torch.tensor(rec["heldout_loss"]).exp().item())
    assert rec["corpus"]["files_heldout"] >= 1 and rec["corpus"]["tokens_train"] > 0
    assert [h["step"] for h in rec["history"]] == [2, 3]
    assert rec["threads"] == 1  # the count it trained on (one for a small model), not the one after


def test_load_reproduces_the_recorded_heldout_loss(tiny_path):
    model, tok = load_corpus_lm(tiny_path, device="cpu")
    assert next(model.parameters()).dtype == torch.float32 and not model.training
    assert model.config.vocab_size == TINY.model.vocab_size >= len(tok)
    loss = clm.heldout_loss(model, heldout_stream(tiny_path), TINY.seq_len, TINY.eval_windows)
    assert loss == pytest.approx(read_corpus_record(tiny_path)["heldout_loss"], abs=1e-6)


def test_second_call_reuses_the_cache(tiny_path, monkeypatch):
    monkeypatch.setenv(clm.CACHE_ENV, str(tiny_path.parents[1]))
    monkeypatch.setattr(clm, "train_corpus_lm", lambda *a, **k: pytest.fail("retrained"))
    assert corpus_lm(TINY, progress=False) == tiny_path


def test_crash_while_saving_leaves_no_cache_entry(cache, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(clm, "atomic_write_json", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        corpus_lm(dataclasses.replace(TINY, steps=2), progress=False)
    assert list(cache.iterdir()) == []


def test_heldout_batch_shape_determinism_and_errors(tiny_path):
    x = heldout_batch(tiny_path, 3, 16, seed=1)
    assert x.shape == (3, 16) and x.dtype == torch.long
    assert 0 <= int(x.min()) and int(x.max()) < TINY.model.vocab_size
    assert torch.equal(x, heldout_batch(tiny_path, 3, 16, seed=1))
    assert not torch.equal(x, heldout_batch(tiny_path, 3, 16, seed=2))
    n = heldout_stream(tiny_path).numel()
    with pytest.raises(ValueError, match="fewer than B"):
        heldout_batch(tiny_path, n // 16 + 1, 16)
    with pytest.raises(ValueError, match="max_positions"):
        heldout_batch(tiny_path, 1, 65)
    with pytest.raises(ValueError, match="B must be"):
        heldout_batch(tiny_path, 0, 16)


def test_missing_or_foreign_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus-LM folder"):
        load_corpus_lm(tmp_path)
    with pytest.raises(FileNotFoundError, match="corpus-LM folder"):
        heldout_batch(tmp_path / "nope", 1, 8)


@pytest.mark.parametrize("name", ["model.safetensors", clm.HELDOUT])
def test_a_truncated_safetensors_file_is_a_clear_error(name, tiny_path, tmp_path):
    """A copy cut short: a ``ValueError`` naming the file and the way out, not safetensors'
    own error."""
    import shutil

    copy = tmp_path / "lm"
    shutil.copytree(tiny_path, copy)
    f = copy / name
    f.write_bytes(f.read_bytes()[:64])
    with pytest.raises(ValueError, match=rf"{name}: damaged safetensors file, truncated or "
                                         rf"partly written .* delete the folder"):
        load_corpus_lm(copy) if name == "model.safetensors" else heldout_stream(copy)
