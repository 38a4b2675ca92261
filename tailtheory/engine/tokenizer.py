"""An offline word-level tokenizer whose vocabulary is padded up to the model's.

The tasks of :mod:`tailtheory.engine.tasks` speak a few dozen words (``P0``, ``T``, ``(``, digits).
A real LLM's vocabulary is orders of magnitude larger than what any one answer needs, and the
unused tokens form the low-probability tail whose mass the mismatch claims are about. To keep
that tail, the vocabulary is filled with ``<unused_i>`` tokens up to the model's ``vocab_size``
(512 by default): ids ``[0, n_used)`` are the words, ``[n_used, V)`` never occur in any data.

Words are separated by whitespace; ``decode`` joins them with single spaces, so
``decode(encode(text)) == " ".join(text.split())`` for any text made of known words.
"""

from __future__ import annotations

from tailtheory.core.checks import check_positive_int

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
"""Special tokens, always ids 0..3 in this order."""

KK_MAX_PEOPLE = 6
"""Largest Knights-and-Knaves puzzle the vocabulary can name (``P0`` .. ``P5``)."""

KK_WORDS = tuple(f"P{i}" for i in range(KK_MAX_PEOPLE)) + (
    "T", "F", ":", ";", "(", ")", "~", "&", "|", ">", "=", "?")
"""Knights and Knaves: people, truth values, statement delimiters and connectives."""

ARITH_WORDS = tuple(str(d) for d in range(10)) + ("+", "-")
"""Chain sums: single digits and the two operators (``=`` is shared with ``KK_WORDS``)."""

TRACE_WORDS = ("try", "is", "ok", "no", "so")
"""Worked-step traces (``kk_trace``): a hypothesis, a statement's value, its verdict, the answer."""

WORDS = tuple(dict.fromkeys(KK_WORDS + ARITH_WORDS + TRACE_WORDS))
"""Every word any task uses, in id order after the specials. New words go at the end, so the ids
of the older ones (and every rendering of the older tasks) never change."""

DEFAULT_VOCAB_SIZE = 512
"""Model vocabulary; 473 of the 512 ids (all but the 39 words and specials) are the unused tail."""


def build_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE, words: tuple[str, ...] = WORDS):
    """A ``PreTrainedTokenizerFast`` (word level, whitespace split) with exactly ``vocab_size`` ids.

    Ids: ``SPECIALS`` (0..3), then ``words``, then ``<unused_i>`` up to ``vocab_size``.
    Unknown words map to ``<unk>``. Nothing is downloaded.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab_size = check_positive_int(vocab_size, "vocab_size")
    names = list(SPECIALS) + [w for w in words if w not in SPECIALS]
    if len(set(names)) != len(names) or any(not w or w != w.strip() or " " in w for w in words):
        raise ValueError("words must be distinct, non-empty and free of whitespace")
    if vocab_size < len(names):
        raise ValueError(f"vocab_size ({vocab_size}) must hold the {len(names)} special and "
                         f"task tokens")
    names += [f"<unused_{i}>" for i in range(vocab_size - len(names))]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(names)}, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK)


def n_used(tokenizer) -> int:
    """Number of ids that are not ``<unused_i>`` padding (specials included)."""
    return sum(1 for w in tokenizer.get_vocab() if not w.startswith("<unused_"))
