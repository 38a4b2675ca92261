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


def _byte_bpe(vocab_size: int, specials: list[str], n_bytes: int):
    """A byte-level BPE backend of ``vocab_size`` ids (``specials`` first) trained on the first
    ``n_bytes`` of standard-library source."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    backend.train_from_iterator(list(_texts(n_bytes)), trainer)
    return backend


@lru_cache(maxsize=4)
def bpe_tokenizer(vocab_size: int = 4096, chat: bool = False):
    """A byte-level BPE of ``vocab_size`` ids (``<|endoftext|>`` = EOS = pad, no BOS; with ``chat``
    also ``<|im_start|>`` / ``<|im_end|>`` and a ChatML template, EOS then ``<|im_end|>``)."""
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>"] + (["<|im_start|>", "<|im_end|>"] if chat else [])
    backend = _byte_bpe(vocab_size, specials, 600_000)
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


# --- the families users train: Qwen3, Llama 3.x, a SentencePiece-tokenized Llama --------------

QWEN3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}")
"""A ChatML template with Qwen3's thinking switch: off, it writes an empty think block."""

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
    "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
"""Llama 3.x instruct's template: a turn ends with ``<|eot_id|>``, not the tokenizer's EOS."""

FAMILY_VOCAB = 3000
"""Tokenizer size of the family checkpoints."""


@lru_cache(maxsize=4)
def family_tokenizer(family: str):
    """A byte-level BPE of :data:`FAMILY_VOCAB` ids with ``family``'s special tokens and chat
    template: ``qwen3`` (EOS ``<|im_end|>``, pad ``<|endoftext|>``, thinking switch) or ``llama3``
    (BOS ``<|begin_of_text|>``, EOS ``<|end_of_text|>`` as a base tokenizer's, no pad, turns ending
    with ``<|eot_id|>``)."""
    from transformers import PreTrainedTokenizerFast

    specials = {"qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
                "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                           "<|end_header_id|>", "<|eot_id|>"]}[family]
    backend = _byte_bpe(FAMILY_VOCAB, specials, 200_000)
    if family == "qwen3":
        tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>",
                                      pad_token="<|endoftext|>")
        tok.chat_template = QWEN3_TEMPLATE
    else:
        tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|begin_of_text|>",
                                      eos_token="<|end_of_text|>")
        tok.chat_template = LLAMA3_TEMPLATE
    return tok


def family_config(family: str, vocab_size: int, **kw):
    """A tiny config of ``family``: ``qwen3`` (head_dim 32 apart from width 64 / 4 heads, q/k
    norms, untied head) or ``llama3`` (llama3 rope scaling over 16 original positions, tied
    head, theta 500,000); ``kw`` override."""
    from transformers import LlamaConfig, Qwen3Config

    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512)
    if family == "qwen3":
        return Qwen3Config(**{**common, "head_dim": 32, "tie_word_embeddings": False, **kw})
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
            "rope_theta": 500000.0}
    return LlamaConfig(**{**common, "rope_parameters": rope, "tie_word_embeddings": True, **kw})


def family_checkpoint(path: str | Path, family: str, seed: int = 0) -> Path:
    """Save a random tiny ``family`` model (``qwen3``, ``llama3`` or ``sentencepiece``: a Llama with
    default rope speaking ``tests/tokenizers_built.sentencepiece_tokenizer``) and its tokenizer to
    ``path``. The ``llama3`` folder's generation config lists two EOS ids, ``<|end_of_text|>`` and
    ``<|eot_id|>``, as Llama 3.x instruct's lists several. Returns ``path``."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    path = Path(path)
    if family == "sentencepiece":
        from tests.tokenizers_built import sentencepiece_tokenizer

        tok = sentencepiece_tokenizer()
        config = family_config("llama3", len(tok), rope_parameters=None, rope_theta=10000.0)
    else:
        tok = family_tokenizer(family)
        config = family_config(family, len(tok))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():                       # norms away from 1, so that they matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    if family == "llama3":
        model.generation_config = GenerationConfig(
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.convert_tokens_to_ids(["<|end_of_text|>", "<|eot_id|>"]))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
