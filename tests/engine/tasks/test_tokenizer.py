"""Tests of ``tailtheory.engine.tasks.tokenizer``: the offline word-level tokenizer of the tasks."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailtheory.engine.tasks.tokenizer import (ARITH_WORDS, KK_WORDS, SPECIALS, TRACE_WORDS, WORDS,
                                         build_tokenizer, n_used)

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
