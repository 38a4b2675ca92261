"""Stop ids (``tailtheory/engine/tasks/chat.py``): a response ends at the first of the chat
template's end-of-turn token, the tokenizer's EOS and a folder's generation-config EOS ids, found
by mask or by those ids, never by comparing with pad (which may be one of them)."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from tailtheory.core.models import tiny_lm
from tailtheory.engine.rollout.engine import RolloutConfig, RolloutEngine
from tailtheory.engine.tasks.chat import (before_stop, end_of_turn_id, generation_eos_ids,
                                           stop_ids)
from tailtheory.engine.tasks.task import get_task
from tailtheory.engine.tasks.tokenizer import build_tokenizer
from tests.checkpoints import bpe_tokenizer

LLAMA3_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
                   "<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>"
                   "\n\n{% endif %}")
"""A template of Llama 3.x instruct's kind: the turn ends with ``<|eot_id|>``, not EOS."""


def _base_with_template(template: str, specials: list[str]):
    """The 4,096-id BPE with its EOS ``<|endoftext|>`` (a base model's) and a chat template whose
    turns end with another special token, as instruct tokenizers built on a base one are."""
    bpe = bpe_tokenizer(4096)
    backend = Tokenizer.from_str(bpe.backend_tokenizer.to_str())     # a copy: specials get added
    tok = PreTrainedTokenizerFast(tokenizer_object=backend,
                                  eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=specials)
    tok.chat_template = template
    return tok


def test_word_level_tokenizer_stops_at_its_eos_only():
    tok = build_tokenizer()
    assert end_of_turn_id(tok) is None
    assert stop_ids(tok) == (tok.eos_token_id,)


def test_chatml_end_of_turn_is_the_primary_stop():
    from tests.checkpoints import CHAT_TEMPLATE

    tok = _base_with_template(CHAT_TEMPLATE, ["<|im_start|>", "<|im_end|>"])
    im_end, eos = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert end_of_turn_id(tok) == im_end
    assert stop_ids(tok) == (im_end, eos)


def test_llama3_template_ends_at_eot_and_a_generation_config_adds_ids():
    tok = _base_with_template(LLAMA3_TEMPLATE, ["<|start_header_id|>", "<|end_header_id|>",
                                                "<|eot_id|>", "<|eom_id|>"])
    eot, eom, eos = tok.convert_tokens_to_ids(["<|eot_id|>", "<|eom_id|>", "<|endoftext|>"])
    assert stop_ids(tok, [eos, eom]) == (eot, eos, eom)          # each once, primary first


def test_plain_text_after_the_turn_is_no_end_of_turn_token():
    tok = _base_with_template("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                              "{% endfor %}", [])
    assert end_of_turn_id(tok) is None
    assert stop_ids(tok) == (tok.eos_token_id,)


@pytest.mark.parametrize("content, expected", [({"eos_token_id": [5, 9]}, [5, 9]),
                                               ({"eos_token_id": 7}, [7]),
                                               ({"bos_token_id": 1}, [])])
def test_generation_eos_ids(tmp_path, content, expected):
    (tmp_path / "generation_config.json").write_text(json.dumps(content))
    assert generation_eos_ids(tmp_path) == expected
    assert generation_eos_ids(tmp_path / "none") == [] and generation_eos_ids(None) == []


@pytest.mark.parametrize("text, match", [("{not json", "not a JSON object"),
                                         ('{"eos_token_id": ["a"]}', "eos_token_id must be"),
                                         ('{"eos_token_id": -1}', "eos_token_id must be"),
                                         ('[1, 2]', "not a JSON object")])
def test_bad_generation_config_is_one_line(tmp_path, text, match):
    (tmp_path / "generation_config.json").write_text(text)
    with pytest.raises(ValueError, match=match):
        generation_eos_ids(tmp_path)


def test_before_stop():
    assert before_stop([4, 5, 9, 6, 1], (1, 9)) == [4, 5]
    assert before_stop([4, 5], (1, 9)) is None
    assert before_stop([1], (1,)) == []


def test_a_second_eos_ends_the_answer_and_pad_may_be_a_stop_id():
    """kk's answer read up to a generation-config EOS that is not the tokenizer's, with pad equal
    to it (Qwen2.5's pad is an EOS id): the reward reads the text before it."""
    tok = build_tokenizer()
    task = get_task("kk", n_people=2, tokenizer=tok, vocab_size=512, stop_ids=[300])
    p = task.problems(1)[0]
    body = task.target_ids(p)[:-1]
    assert task.stop_ids == (tok.eos_token_id, 300)
    assert task.reward(p, body + [300, 300, 300]).correct                    # pad 300 after it
    assert task.reward(p, body + [300] + task.encode(" T T")).correct       # text after: ignored
    assert not task.reward(p, body).format_ok                               # no stop: no answer
    with pytest.raises(ValueError, match=r"stop ids must lie in \[0, 512\)"):
        get_task("kk", tokenizer=tok, vocab_size=512, stop_ids=[512])


@pytest.mark.parametrize("backend", ["fast", "hf"])
def test_a_planted_second_stop_id_ends_a_row_in_the_rollout(backend):
    """Sample once with no reachable stop; then again from the same generator with the token row
    0 drew at step 2 as a second stop id and pad equal to it: row 0 ends there (mask), the rest of
    the batch samples on, and the earlier tokens are the same draws."""
    model = tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1, seed=3)
    eng = RolloutEngine(model, RolloutConfig(path="kv", max_new_tokens=8, backend=backend))
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    free = eng.generate(prompts, eos_id=1, pad_id=0, generator=torch.Generator().manual_seed(0))
    assert free.mask[0, :3].all()
    planted = int(free.response[0, 2])
    rb = eng.generate(prompts, eos_id=[1, planted], pad_id=planted,
                      generator=torch.Generator().manual_seed(0))
    assert rb.response[0, :3].tolist() == free.response[0, :3].tolist()
    first = free.response[0, :3].tolist().index(planted)
    T = rb.mask.shape[1]
    assert rb.mask[0].tolist() == [True] * (first + 1) + [False] * (T - first - 1)
    assert (rb.response[0, first + 1:] == planted).all()                 # pad after the end
    for r in range(3):                   # a row ends only at a stop id, or runs to the cap
        n = int(rb.mask[r].sum())
        assert n == 8 or int(rb.response[r, n - 1]) in (1, planted)
