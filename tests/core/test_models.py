"""Tests of ``tailtheory.core.models``: tiny LMs from a config, loading local checkpoints."""

import json

import pytest
import torch

from tailtheory.engine.tasks.tokenizer import build_tokenizer
from tailtheory.core.models import TinyLMConfig, hf_config, load_lm, num_params, tiny_lm

SMALL = dict(vocab_size=64, hidden=32, layers=1, heads=2, kv_heads=1)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_tiny_lm_is_seeded_float32_eval(arch):
    a, b = tiny_lm(seed=3, arch=arch, **SMALL), tiny_lm(seed=3, arch=arch, **SMALL)
    c = tiny_lm(seed=4, arch=arch, **SMALL)
    pa, pc = next(a.parameters()), next(c.parameters())
    assert not a.training and pa.dtype == torch.float32
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(pa, pc)
    assert a.config.vocab_size == 64


def test_sizes_span_1m_to_30m():
    """The documented range: ~1M at the warm-start size, ~30M at hidden 512 and 8 layers."""
    small = num_params(tiny_lm(TinyLMConfig(hidden=128, layers=4, heads=4, kv_heads=2)))
    large = num_params(tiny_lm(TinyLMConfig(hidden=512, layers=8, heads=8, kv_heads=4,
                                            vocab_size=4096)))
    assert 0.5e6 < small < 2e6 and 20e6 < large < 40e6


@pytest.mark.parametrize("bad, match", [
    (dict(arch="gpt9"), "arch"), (dict(vocab_size=1), "vocab_size"),
    (dict(hidden=30, heads=4), "hidden"), (dict(heads=4, kv_heads=3), "kv_heads")])
def test_hf_config_rejects_bad_sizes(bad, match):
    with pytest.raises(ValueError, match=match):
        hf_config(TinyLMConfig(**bad))


def test_load_lm_round_trip_with_tokenizer(tmp_path):
    """A checkpoint saved with its tokenizer loads back with identical weights and outputs."""
    model, tok = tiny_lm(seed=1, **SMALL), build_tokenizer(vocab_size=64)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = load_lm(tmp_path, device="cpu")
    x = torch.tensor([tok.encode("P0 : P1 T ; ?", add_special_tokens=False)])
    assert torch.equal(model(input_ids=x).logits, loaded(input_ids=x).logits)
    assert not loaded.training and next(loaded.parameters()).dtype == torch.float32

    from transformers import AutoTokenizer
    tok2 = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert tok2.get_vocab() == tok.get_vocab() and len(tok2) == loaded.config.vocab_size


def test_load_lm_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_lm(tmp_path / "nowhere")


def test_load_lm_not_a_checkpoint(tmp_path):
    """An empty folder, and a folder whose config names no known causal LM, are ValueErrors."""
    with pytest.raises(ValueError, match="config.json"):
        load_lm(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "not-a-model"}))
    with pytest.raises(ValueError, match="causal LM"):
        load_lm(tmp_path)


def test_load_lm_config_without_weights(tmp_path):
    """A valid config without weight files is not a loadable causal LM."""
    hf_config(TinyLMConfig(**SMALL)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="causal LM"):
        load_lm(tmp_path)


def test_load_lm_refuses_pickled_weights(tmp_path):
    """A checkpoint whose weights are a pickle (``pytorch_model.bin``) is refused: unpickling
    can run code. Only safetensors weights load."""
    model = tiny_lm(TinyLMConfig(vocab_size=32, hidden=32, layers=1, heads=2, kv_heads=1))
    model.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="does not hold a causal LM"):
        load_lm(tmp_path)


def test_cache_keyword_and_output_cache_across_transformers_versions():
    """The KV cache is passed and read under whichever name the installed transformers uses
    (``cache`` from 5.24, ``past_key_values`` before), without a deprecation message."""
    from types import SimpleNamespace

    from tailtheory.core.models import cache_keyword, output_cache

    new = SimpleNamespace(forward=lambda input_ids=None, cache=None, use_cache=None: None)
    old = SimpleNamespace(forward=lambda input_ids=None, past_key_values=None, use_cache=None: None)
    assert cache_keyword(new) == "cache" and cache_keyword(old) == "past_key_values"
    assert output_cache({"logits": 1, "cache": "C"}) == "C"
    assert output_cache({"logits": 1, "past_key_values": "P"}) == "P"
    with pytest.raises(ValueError, match="use_cache=True"):
        output_cache({"logits": 1})
    model = tiny_lm()
    assert cache_keyword(model) in ("cache", "past_key_values")
    out = model(input_ids=torch.tensor([[1, 2]]), use_cache=True)
    nxt = model(input_ids=torch.tensor([[3]]), use_cache=True,
                **{cache_keyword(model): output_cache(out)})
    full = model(input_ids=torch.tensor([[1, 2, 3]])).logits[:, -1]
    assert torch.allclose(nxt.logits[:, -1], full, atol=1e-5)


def test_checkpoint_fingerprint_covers_the_stop_ids_and_the_weights_index(tmp_path):
    """A changed ``generation_config.json`` (its stop ids end every rollout) or safetensors index
    is another model folder; a file the loader does not read is not."""
    from tailtheory.core.models import checkpoint_fingerprint

    tiny_lm(layers=1).save_pretrained(tmp_path)
    before = checkpoint_fingerprint(tmp_path)
    (tmp_path / "README.md").write_text("notes")
    assert checkpoint_fingerprint(tmp_path) == before
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [1, 2]}')
    with_stops = checkpoint_fingerprint(tmp_path)
    assert with_stops != before
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [1]}')
    assert checkpoint_fingerprint(tmp_path) not in (before, with_stops)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    assert checkpoint_fingerprint(tmp_path) not in (before, with_stops)
