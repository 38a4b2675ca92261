"""Checkpoints as a user brings them: a Qwen2-style model saved with ``save_pretrained`` beside its
own byte-level BPE tokenizer, made here (nothing is downloaded).

- :func:`user_checkpoint`: V >= 4,096, a BPE trained by ``tokenizers`` on text of the running
  Python's standard library; ``<|endoftext|>`` is both EOS and padding and there is no BOS, as in
  Qwen2.5's base tokenizers; ``chat=True`` adds a chat template (an instruct model's).
- :func:`qwen_vocab_checkpoint`: a random model at Qwen2.5's V = 151,936 with one narrow layer,
  for the memory path (its tokenizer is the small BPE: ids below 4,096 are what it speaks).
"""

from __future__ import annotations

import sysconfig
from functools import lru_cache
from pathlib import Path

QWEN_VOCAB = 151_936
"""Qwen2.5's embedding rows (its tokenizer has fewer tokens; the rest are padding rows)."""

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""A ChatML template of the kind Qwen's instruct tokenizers carry."""


@lru_cache(maxsize=4)
def _texts(n_bytes: int = 600_000) -> tuple[str, ...]:
    """Standard-library source, sorted by path, up to ``n_bytes``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out, total = [], 0
    for f in sorted(root.glob("*.py")):
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(text)
        total += len(text)
        if total >= n_bytes:
            break
    return tuple(out)


@lru_cache(maxsize=4)
def bpe_tokenizer(vocab_size: int = 4096, chat: bool = False):
    """A byte-level BPE of ``vocab_size`` ids (``<|endoftext|>`` = EOS = pad, no BOS; with ``chat``
    also ``<|im_start|>`` / ``<|im_end|>`` and a ChatML template, EOS then ``<|im_end|>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>"] + (["<|im_start|>", "<|im_end|>"] if chat else [])
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    backend.train_from_iterator(list(_texts()), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=specials[-1],
                                  pad_token="<|endoftext|>")
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def user_checkpoint(path: str | Path, vocab_size: int = 4096, chat: bool = False,
                    model_vocab: int | None = None, hidden: int = 64, layers: int = 2,
                    seed: int = 0) -> Path:
    """Save a random Qwen2-style model (``model_vocab`` rows, default the tokenizer's size) and
    its BPE tokenizer to ``path``; returns ``path``."""
    from tailtheory.core.models import tiny_lm

    path = Path(path)
    tok = bpe_tokenizer(vocab_size, chat)
    model = tiny_lm(vocab_size=model_vocab or len(tok), hidden=hidden, layers=layers, heads=2,
                    kv_heads=1, seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def qwen_vocab_checkpoint(path: str | Path) -> Path:
    """A one-layer, width-32 model at V = 151,936 with the 4,096-id BPE (the memory path)."""
    return user_checkpoint(path, model_vocab=QWEN_VOCAB, hidden=32, layers=1)
