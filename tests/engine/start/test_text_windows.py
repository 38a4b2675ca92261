"""Tests of tailtheory.engine.start.text_windows: standard-library text, read with a checkpoint's own
tokenizer, cut into the probes' windows."""

import pytest
import torch

from tailtheory.engine.start.text_windows import text_windows


@pytest.fixture(scope="module")
def tokenizer():
    from tests.checkpoints import bpe_tokenizer

    return bpe_tokenizer(4096)


def test_windows_shape_determinism_and_text(tokenizer):
    """B distinct windows of L ids below the vocabulary, the same for a seed, decoding to
    Python source."""
    a = text_windows(tokenizer, 4, 50, seed=0, vocab_size=len(tokenizer))
    assert a.shape == (4, 50) and a.dtype == torch.long
    assert torch.equal(a, text_windows(tokenizer, 4, 50, seed=0))
    assert not torch.equal(a, text_windows(tokenizer, 4, 50, seed=1))
    assert len({tuple(r) for r in a.tolist()}) == 4
    assert int(a.max()) < len(tokenizer) and int(a.min()) >= 0
    text = tokenizer.decode(a[0])
    assert any(w in text for w in ("def ", "import ", "self", "return", "(", "="))


def test_bad_input(tokenizer):
    with pytest.raises(ValueError, match="batch must be >= 1"):
        text_windows(tokenizer, 0, 8)
    with pytest.raises(ValueError, match="length must be >= 2"):
        text_windows(tokenizer, 2, 1)
    with pytest.raises(ValueError, match="fewer than"):
        text_windows(tokenizer, 10**6, 512)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        text_windows(tokenizer, 2, 64, vocab_size=100)
