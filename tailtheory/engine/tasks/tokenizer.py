"""An offline word-level tokenizer whose vocabulary is padded up to the model's.

The tasks of :mod:`tailtheory.engine.tasks.task` speak a few dozen words (``P0``, ``T``, ``(``, digits).
A real LLM's vocabulary is orders of magnitude larger than what any one answer needs, and the
unused tokens form the low-probability tail whose mass the mismatch claims are about. To keep
that tail, the vocabulary is filled with ``<unused_i>`` tokens up to the model's ``vocab_size``
(512 by default): ids ``[0, n_used)`` are the words, ``[n_used, V)`` never occur in any data.

Words are separated by whitespace; ``decode`` joins them with single spaces, so
``decode(encode(text)) == " ".join(text.split())`` for any text made of known words.

The tasks speak text (STYLE rule 19): any tokenizer that can write their words serves, a user's
byte-level BPE as well as this one. :func:`check_tokenizer` is what a tokenizer must satisfy
(an EOS, no more tokens than the model has rows, every task word written back as itself), and
:func:`tokens_per_word` how many tokens a task word takes at most (1 here).
"""

from __future__ import annotations

import torch

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


def tokens_per_word(tokenizer, words: tuple[str, ...] = WORDS) -> int:
    """The most tokens any of ``words`` takes, encoded after a space (as inside a response) or
    alone (a response's first word after a chat template's newline); 1 for
    :func:`build_tokenizer`'s. A response of ``n`` words takes at most ``n`` times this for
    tokenizers that split text at spaces before merging (byte-level BPE, word level)."""
    return max(len(tokenizer.encode(form, add_special_tokens=False))
               for w in words for form in (f" {w}", w))


def check_tokenizer(tokenizer, vocab_size: int, path: str | None = None,
                    words: tuple[str, ...] = WORDS) -> None:
    """Raise ``ValueError`` (one line, naming the fix) unless the tasks can speak to a model of
    ``vocab_size`` embedding rows through ``tokenizer``: it has an EOS token, no more tokens than
    the model has rows, and ``decode(encode(" " + w))`` gives back every task word ``w`` (a word
    it cannot write, e.g. one that becomes ``<unk>``, would make every answer unreadable).
    ``path``: the folder it was read from, for the messages."""
    where = f"the tokenizer in {path}" if path else "the tokenizer"
    save = f"tokenizer.save_pretrained({str(path)!r})" if path else "tokenizer.save_pretrained(PATH)"
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{where} has no EOS token, so no response can end: set the one the "
                         f"model was trained to stop with (tokenizer.eos_token = '...') and save "
                         f"it: {save}")
    n = len(tokenizer)
    if n > vocab_size:
        raise ValueError(f"{where} has {n:,} tokens, more than the model's vocabulary of "
                         f"{vocab_size:,} rows (ids {vocab_size:,} and up have no embedding): "
                         f"save the tokenizer the model was trained with beside it ({save}), or "
                         f"grow the model's rows to match (model.resize_token_embeddings(len("
                         f"tokenizer)), then save_pretrained)")
    bad = [w for w in words if _written_back(tokenizer, w) != [w]]
    if bad:
        shown = ", ".join(f"{w!r} -> {' '.join(_written_back(tokenizer, w)) or 'nothing'!r}"
                          for w in bad[:4])
        raise ValueError(f"{where} cannot write {len(bad)} of the tasks' {len(words)} words "
                         f"({shown}{', ...' if len(bad) > 4 else ''}): decode(encode(text)) does "
                         f"not give them back, so no answer could be read; use a tokenizer that "
                         f"writes any text (a byte-level BPE such as Qwen's or Llama's)")


def _written_back(tokenizer, word: str) -> list[str]:
    """The words ``decode(encode(" " + word))`` gives, unknown tokens kept as written."""
    ids = tokenizer.encode(f" {word}", add_special_tokens=False)
    return tokenizer.decode(ids, skip_special_tokens=False,
                            clean_up_tokenization_spaces=False).split()


def as_id_list(ids, V: int, name: str) -> list[int]:
    """Token ids as a list of ints inside ``[0, V)``."""
    t = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(list(ids))
    if t.numel() == 0:
        t = t.long()
    if t.ndim != 1 or t.is_floating_point():
        raise ValueError(f"{name} must be a 1-D sequence of integer ids, got shape "
                         f"{tuple(t.shape)} dtype {t.dtype}")
    if t.numel() and (t.min() < 0 or t.max() >= V):
        raise ValueError(f"{name} must lie in [0, {V}); got range [{int(t.min())}, {int(t.max())}]")
    return [int(i) for i in t.tolist()]
