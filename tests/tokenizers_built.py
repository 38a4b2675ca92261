"""Tokenizers of the kinds users bring besides byte-level BPE, made here from text of the running
Python's standard library (nothing is downloaded; each builds in about a second).

- :func:`sentencepiece_tokenizer`: laid out as transformers' conversion of Llama-2's: normalizer
  ``Prepend("▁")`` then ``Replace(" ", "▁")``, no pre-tokenizer, a BPE with ``byte_fallback``
  whose ids are ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<0x00>`` .. ``<0xFF>`` 3..258, then the
  learned pieces; decoder ``Replace("▁", " ")``, ``ByteFallback``, ``Fuse``, ``Strip(" ", 1, 0)``;
  BOS ``<s>``, EOS ``</s>``, unk ``<unk>``, no pad. Its merges are learned inside words (split at
  ``▁`` while training, as SentencePiece splits at whitespace), so none crosses a word, as in
  Llama-2's; ``merge_across_words=True`` learns them on whole lines instead, so tokens such as
  ``▁=▁`` and ``0▁`` span word boundaries.
- :func:`merge_trap_tokenizer`: the same layout with six hand-ranked merges, under which a word
  takes more tokens inside a response than alone: `` P0`` and ``P0`` are one token each, while
  `` P0 P0 P0`` is six (``▁▁P`` ``0▁`` ``P`` ``0▁`` ``P`` ``0``: ``0▁`` ranks first).
- :func:`wordpiece_tokenizer`: BERT-like: lower-casing normalizer, ``BertPreTokenizer``, a
  WordPiece model, ``[PAD]`` ``[UNK]`` ``[CLS]`` ``[SEP]`` ``[MASK]``, no EOS.
"""

from __future__ import annotations

import json
from functools import lru_cache

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tests.checkpoints import _texts

SP_SPECIALS = ("<unk>", "<s>", "</s>")
"""Llama-2's added tokens, ids 0, 1, 2: unknown, BOS, EOS."""

BYTE_TOKENS = tuple(f"<0x{i:02X}>" for i in range(256))
"""SentencePiece's byte-fallback tokens, ids 3..258 after ``<unk>``, ``<s>``, ``</s>``."""


@lru_cache(maxsize=1)
def _lines() -> tuple[str, ...]:
    """The non-blank lines of :func:`tests.checkpoints._texts`, in order."""
    return tuple(line for text in _texts() for line in text.splitlines() if line.strip())


@lru_cache(maxsize=4)
def sentencepiece_tokenizer(vocab_size: int = 3000, merge_across_words: bool = False):
    """A Llama-2-style SentencePiece BPE of ``vocab_size`` ids (module docstring)."""
    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    backend.normalizer = _llama_normalizer()
    if not merge_across_words:
        backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=[*SP_SPECIALS, *BYTE_TOKENS])
    backend.train_from_iterator(list(_lines()), trainer)
    model = json.loads(backend.to_str())["model"]
    return _llama_layout(models.BPE(model["vocab"], [tuple(m) for m in model["merges"]],
                                    unk_token="<unk>", byte_fallback=True, fuse_unk=True))


@lru_cache(maxsize=1)
def merge_trap_tokenizer():
    """A Llama-2-layout BPE whose pieces are the characters ``▁`` ``P`` ``0`` and six merges
    (module docstring); every other character is written as bytes."""
    merges = [("0", "▁"), ("▁", "▁"), ("▁▁", "P"), ("▁▁P", "0"), ("▁", "P"), ("▁P", "0")]
    names = [*SP_SPECIALS, *BYTE_TOKENS, "▁", "P", "0", *(a + b for a, b in merges)]
    return _llama_layout(models.BPE({t: i for i, t in enumerate(names)}, merges,
                                    unk_token="<unk>", byte_fallback=True, fuse_unk=True))


def _llama_layout(model) -> PreTrainedTokenizerFast:
    """``model`` inside the pipeline of transformers' Llama-2 conversion: ``▁`` for spaces and
    one before the text, no pre-tokenizer (merges apply to the whole text), bytes decoded, the
    leading space stripped; only ``<unk>`` ``<s>`` ``</s>`` are added tokens."""
    backend = Tokenizer(model)
    backend.normalizer = _llama_normalizer()
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    backend.add_special_tokens(list(SP_SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


@lru_cache(maxsize=2)
def wordpiece_tokenizer(vocab_size: int = 2000):
    """A BERT-like WordPiece of ``vocab_size`` ids (module docstring)."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials,
                                        show_progress=False)
    backend.train_from_iterator(list(_lines()), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def _llama_normalizer():
    """``▁`` before the text, and ``▁`` for every space."""
    return normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
