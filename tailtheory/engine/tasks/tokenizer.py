"""An offline word-level tokenizer whose vocabulary is padded up to the model's.

The tasks of :mod:`tailtheory.engine.tasks.task` speak a few dozen words (``P0``, ``T``, ``(``, digits).
A real LLM's vocabulary is orders of magnitude larger than what any one answer needs, and the
unused tokens form the low-probability tail whose mass the mismatch claims are about. To keep
that tail, the vocabulary is filled with ``<unused_i>`` tokens up to the model's ``vocab_size``
(512 by default): ids ``[0, n_used)`` are the words, ``[n_used, V)`` never occur in any data.

Words are separated by whitespace; ``decode`` joins them with single spaces, so
``decode(encode(text)) == " ".join(text.split())`` for any text made of known words.

The tasks speak text (STYLE rule 19): any tokenizer that can write their words serves, a user's
byte-level BPE or SentencePiece (Llama-2's: ``▁`` for spaces, bytes for unknown characters) as
well as this one. :func:`check_tokenizer` is what a tokenizer must satisfy (not WordPiece, an
EOS, no more tokens than the model has rows, every task word written back as itself), and
:func:`tokens_per_word` how many tokens a response's word takes at most (1 here).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers

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
    """How many tokens a response's word takes at most: a response of ``n >= 1`` of ``words``
    joined by single spaces, after a space (as after a prompt's last word) or not (after a chat
    template's newline), takes at most ``n`` times this many tokens; the empty response (its space
    alone) at most this many. 1 for :func:`build_tokenizer`'s.

    - A tokenizer whose pre-tokenizer splits text at whitespace before its model sees it
      (byte-level BPE with its regex, word level, ``Metaspace`` with ``split``): every word is
      tokenized on its own, so the bound is measured, the most tokens any word takes encoded
      after a space or alone.
    - Any other (a SentencePiece conversion such as Llama-2's: no pre-tokenizer, so merges may
      cross words): its model starts from initial symbols, one per character of the normalized
      text, or one per UTF-8 byte for a character its vocabulary lacks when it falls back to
      bytes (``<0xXX>`` tokens), and every token it gives (BPE, Unigram) covers at least one. The
      bound is the most symbols any word's text has, ``" " + w`` or ``w`` normalized: the
      space's ``▁``, the word's characters, and the ``▁`` a ``Prepend`` normalizer (or
      ``Metaspace``) puts at the start of a text, which every word's count holds once, so ``n``
      words pay for the one a response has. Never below the measured count.

    The second rule holds for normalizers and pre-tokenizers that rewrite text character by
    character apart from a marker at its start (``Replace``, ``Prepend``, ``Metaspace``,
    ``Strip``, the Unicode forms on these ASCII words). A tokenizer without a ``tokenizers``
    backend (a Python one) is measured as in the first rule."""
    forms = [form for w in words for form in (f" {w}", w)]
    measured = max(len(tokenizer.encode(form, add_special_tokens=False)) for form in forms)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer) or _splits_at_spaces(backend):
        return measured
    return max(measured, max(sum(_initial_symbols(backend.model, piece)
                                 for piece in _pre_tokenized(backend, form)) for form in forms))


def _pre_tokenized(backend: Tokenizer, text: str) -> list[str]:
    """The pieces ``backend``'s model sees of ``text``: normalized, then pre-tokenized."""
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return [text]
    return [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(text)]


def _splits_at_spaces(backend: Tokenizer) -> bool:
    """Whether ``backend`` hands its model the words of ``"a b"`` as separate pieces."""
    pieces = _pre_tokenized(backend, "a b")
    return len(pieces) >= 2 and not any("a" in p and "b" in p for p in pieces)


def _initial_symbols(model, text: str) -> int:
    """The symbols ``model`` starts ``text`` from: one per character its vocabulary holds (with
    any continuing-subword prefix or end-of-word suffix it adds), one per UTF-8 byte for any other
    when it falls back to bytes (BPE's ``byte_fallback``; other models: when they hold
    ``<0x00>``), else one (an unknown token)."""
    fallback = getattr(model, "byte_fallback", None)
    if fallback is None:
        fallback = model.token_to_id("<0x00>") is not None
    prefix = getattr(model, "continuing_subword_prefix", None) or ""
    suffix = getattr(model, "end_of_word_suffix", None) or ""
    affixed = {(a, b) for a in ("", prefix) for b in ("", suffix)}

    def known(c: str) -> bool:
        return all(model.token_to_id(a + c + b) is not None for a, b in affixed)

    return sum(1 if not fallback or known(c) else len(c.encode("utf-8")) for c in text)


def marks_text_start(tokenizer, words: tuple[str, ...] = WORDS) -> bool:
    """Whether ``tokenizer`` writes the space before a text's first word itself, as the legacy
    SentencePiece conversions do (a ``Prepend("▁")`` normalizer): every word alone encodes as it
    does after another word and a space, and after a space of its own as something else
    (``" T"`` is ``▁`` ``▁T``, a lone ``▁`` that ``prompt + " T"`` encoded together does not
    have). A response then needs no space of its own after a prompt. False for byte-level BPE
    (``T`` and ``ĠT`` differ) and word level (a space changes nothing)."""
    def enc(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    head = len(enc(words[0]))
    return all(enc(w) != enc(f" {w}") and enc(f"{words[0]} {w}")[head:] == enc(w) for w in words)


def check_tokenizer(tokenizer, vocab_size: int, path: str | None = None,
                    words: tuple[str, ...] = WORDS) -> None:
    """Raise ``ValueError`` (one line, naming the fix) unless the tasks can speak to a model of
    ``vocab_size`` embedding rows through ``tokenizer``: it has an EOS token, no more tokens than
    the model has rows, and ``decode(encode(" " + w))`` gives back every task word ``w`` (a word
    it cannot write, e.g. one that becomes ``<unk>``, would make every answer unreadable).
    ``path``: the folder it was read from, for the messages. A WordPiece tokenizer (BERT's) is
    refused by name before any other check: it lower-cases text and/or its decoder drops the
    spaces before punctuation, so the tasks' words do not come back."""
    where = f"the tokenizer in {path}" if path else "the tokenizer"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, Tokenizer) and isinstance(backend.model, models.WordPiece):
        raise ValueError(f"{where} is a WordPiece tokenizer (BERT-style: it lower-cases text "
                         f"and/or drops the spaces between words, so task words such as 'T', "
                         f"'F', 'P0' would not come back): use the model's byte-level BPE or "
                         f"SentencePiece tokenizer (a causal LM's, such as Qwen's or Llama's)")
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
                         f"writes any text (a byte-level BPE such as Qwen's, or a SentencePiece "
                         f"with byte fallback such as Llama-2's)")


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
