"""Tests of ``tailtheory.engine.tasks.tokenizer``: the offline word-level tokenizer of the tasks,
what a user's tokenizer must satisfy, and the bound on a response's tokens for byte-level BPE,
SentencePiece (merges inside words, across words, and ranked to split words apart) and word level.
"""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tailtheory.engine.tasks.knights_knaves import PROSE_WORDS
from tailtheory.engine.tasks.tokenizer import (ARITH_WORDS, KK_WORDS, SPECIALS, TRACE_WORDS, WORDS,
                                               build_tokenizer, check_tokenizer, marks_text_start,
                                               n_used, tokens_per_word)
from tests.checkpoints import bpe_tokenizer
from tests.tokenizers_built import (merge_trap_tokenizer, sentencepiece_tokenizer,
                                    wordpiece_tokenizer)

@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=40))
def test_tokenizer_round_trip(words):
    tok = _TOK
    ids = tok.encode(" ".join(words), add_special_tokens=False)
    assert len(ids) == len(words) and max(ids) < n_used(tok)
    assert tok.decode(ids) == " ".join(words)


_TOK = build_tokenizer()


def test_tokenizer_vocabulary_has_an_unused_tail():
    """Specials first, then task words, then ``<unused_i>`` up to the model's vocabulary."""
    tok = build_tokenizer(vocab_size=512)
    assert len(tok) == 512 and n_used(tok) == len(SPECIALS) + len(WORDS)
    assert [tok.convert_tokens_to_ids(s) for s in SPECIALS] == [0, 1, 2, 3]
    assert tok.convert_ids_to_tokens(511) == f"<unused_{511 - n_used(tok)}>"
    assert tok.encode("P0 banana", add_special_tokens=False)[1] == tok.unk_token_id


def test_tokenizer_new_words_come_last():
    """Older words keep their ids (``P0`` is 4, ``-`` is 33), the trace words follow them."""
    tok = build_tokenizer()
    old = list(dict.fromkeys(KK_WORDS + ARITH_WORDS))
    assert [tok.convert_tokens_to_ids(w) for w in old] == list(range(4, 4 + len(old)))
    assert tok.convert_tokens_to_ids(["P0", "-"]) == [4, 33]
    assert tok.convert_tokens_to_ids(list(TRACE_WORDS)) == list(range(34, 34 + len(TRACE_WORDS)))


def test_tokenizer_save_load(tmp_path):
    from transformers import AutoTokenizer

    tok = build_tokenizer(vocab_size=300)
    tok.save_pretrained(tmp_path)
    back = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "P0 : ( P1 T > P0 F ) ; ? T F"
    assert back.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert (back.eos_token_id, back.pad_token_id, len(back)) == (tok.eos_token_id,
                                                                 tok.pad_token_id, 300)


@pytest.mark.parametrize("kw, match", [
    (dict(vocab_size=10), "vocab_size"), (dict(vocab_size=0), "vocab_size"),
    (dict(words=("a", "a")), "distinct"), (dict(words=("a b",)), "whitespace")])
def test_tokenizer_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        build_tokenizer(**kw)


# --- a user's tokenizer -----------------------------------------------------------------------

def _rebuilt(tok, **parts) -> PreTrainedTokenizerFast:
    """A copy of ``tok`` whose backend has ``parts`` (``normalizer=``, ``pre_tokenizer=``) set."""
    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    for name, part in parts.items():
        setattr(backend, name, part)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=tok.bos_token,
                                   eos_token=tok.eos_token, unk_token=tok.unk_token)


def _metaspace_llama():
    """The SentencePiece tokenizer as transformers 5's ``LlamaTokenizer`` rebuilds it: no
    normalizer, a ``Metaspace`` pre-tokenizer that prepends ``▁`` and does not split."""
    return _rebuilt(sentencepiece_tokenizer(), normalizer=None, pre_tokenizer=pre_tokenizers
                    .Metaspace(prepend_scheme="always", split=False))


TOKENIZERS = {"byte-level BPE": lambda: bpe_tokenizer(),
              "byte-level BPE 512": lambda: bpe_tokenizer(512),
              "SentencePiece": lambda: sentencepiece_tokenizer(),
              "SentencePiece, merges across words": lambda: sentencepiece_tokenizer(
                  merge_across_words=True),
              "SentencePiece, Metaspace": _metaspace_llama,
              "merge trap": lambda: merge_trap_tokenizer(),
              "word level": lambda: build_tokenizer(words=WORDS + PROSE_WORDS)}


def _responses(words, n=300, seed=0) -> list[list[str]]:
    rng = random.Random(seed)
    return [rng.choices(words, k=rng.randint(1, 40)) for _ in range(n)]


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@pytest.mark.parametrize("words", [WORDS, WORDS + PROSE_WORDS, ("P0",)], ids=["task", "prose",
                                                                               "P0"])
def test_tokens_per_word_bounds_every_response(name, words):
    """``n`` words, after a space or not, never take more than ``n * tokens_per_word`` tokens;
    the empty response (a space) at most one word's bound."""
    tok = TOKENIZERS[name]()
    bound = tokens_per_word(tok, words)
    for seq in _responses(words) + [list(words)]:
        for text in (" " + " ".join(seq), " ".join(seq)):
            assert len(tok.encode(text, add_special_tokens=False)) <= len(seq) * bound, text
    assert len(tok.encode(" ", add_special_tokens=False)) <= bound


def test_merge_trap_takes_more_tokens_in_a_response_than_alone():
    """Measuring words alone is no bound once merges cross words: `` P0`` and ``P0`` are one token
    each, `` P0 P0 P0`` is six; the bound from the symbols (``▁▁P0``) is 4."""
    tok = merge_trap_tokenizer()
    assert [len(tok.encode(t, add_special_tokens=False)) for t in (" P0", "P0")] == [1, 1]
    assert tok.convert_ids_to_tokens(tok.encode(" P0 P0 P0", add_special_tokens=False)) == [
        "▁▁P", "0▁", "P", "0▁", "P", "0"]
    assert tokens_per_word(tok, ("P0",)) == 4


def test_tokens_per_word_counts_symbols_and_bytes():
    """Without a whitespace split: ``▁`` for the space, ``▁`` prepended, the characters, and one
    per UTF-8 byte for a character outside the vocabulary (``é`` 2 bytes, ``中`` 3)."""
    assert tokens_per_word(sentencepiece_tokenizer()) == len("▁▁try")
    assert tokens_per_word(_metaspace_llama()) == len("▁try")
    trap = merge_trap_tokenizer()
    assert [tokens_per_word(trap, (w,)) for w in ("é", "中", "P0 é")] == [4, 5, 7]
    assert len(trap.encode(" é", add_special_tokens=False)) == 3  # ▁▁ <0xC3> <0xA9>


@pytest.mark.parametrize("tok, words, before", [
    (lambda: build_tokenizer(), WORDS, 1),
    (lambda: build_tokenizer(words=WORDS + PROSE_WORDS), WORDS + PROSE_WORDS, 1),
    (lambda: bpe_tokenizer(), WORDS, 2), (lambda: bpe_tokenizer(chat=True), WORDS, 2),
    (lambda: bpe_tokenizer(), WORDS + PROSE_WORDS, 4), (lambda: bpe_tokenizer(512), WORDS, 3),
    (lambda: bpe_tokenizer(512), WORDS + PROSE_WORDS, 7)])
def test_tokens_per_word_unchanged_where_words_are_split(tok, words, before):
    """Word level and byte-level BPE split at whitespace: still measured, the values runs had."""
    assert tokens_per_word(tok(), words) == before


def test_sentencepiece_writes_the_task_words():
    tok = sentencepiece_tokenizer()
    check_tokenizer(tok, len(tok))
    check_tokenizer(_metaspace_llama(), len(tok))
    assert (tok.bos_token, tok.eos_token, tok.unk_token, tok.pad_token) == ("<s>", "</s>",
                                                                            "<unk>", None)
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 258]) == ["<unk>", "<s>", "</s>", "<0x00>",
                                                            "<0xFF>"]
    for seq in _responses(WORDS + PROSE_WORDS):
        for text in (" " + " ".join(seq), " ".join(seq)):
            ids = tok.encode(text, add_special_tokens=False)
            assert tok.decode(ids, skip_special_tokens=False,
                              clean_up_tokenization_spaces=False).split() == seq


def test_marks_text_start():
    """SentencePiece's prepended ``▁`` writes a response's first space: the response encoded alone
    is what it is after the prompt, encoded together."""
    sp, prompt, answer = sentencepiece_tokenizer(), "P0 : ( P1 T = P0 F ) ; ?", "try T F : P0 so F"
    assert marks_text_start(sp)
    together = sp.encode(f"{prompt} {answer}", add_special_tokens=False)
    assert together == sp.encode(prompt, add_special_tokens=False) + sp.encode(
        answer, add_special_tokens=False)
    assert not any(marks_text_start(t) for t in (bpe_tokenizer(), build_tokenizer(),
                                                 _metaspace_llama()))


def test_wordpiece_refused_by_name():
    tok = wordpiece_tokenizer()
    with pytest.raises(ValueError, match="WordPiece .*byte-level BPE or SentencePiece") as info:
        check_tokenizer(tok, len(tok), "bert")
    assert "\n" not in str(info.value) and "bert" in str(info.value)


@pytest.mark.parametrize("tok", [lambda: bpe_tokenizer(), lambda: sentencepiece_tokenizer()])
def test_lowercasing_normalizer_is_caught(tok):
    """``P0`` and ``T`` come back as ``p0`` and ``t``: the words cannot be written."""
    tok = tok()
    low = _rebuilt(tok, normalizer=normalizers.Sequence(
        [normalizers.Lowercase()] + ([tok.backend_tokenizer.normalizer]
                                     if tok.backend_tokenizer.normalizer else [])))
    with pytest.raises(ValueError, match="cannot write 8 of .*'P0' -> 'p0'"):
        check_tokenizer(low, len(low))
