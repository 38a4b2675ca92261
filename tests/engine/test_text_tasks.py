"""Tasks speak text (``tailtheory/engine/tasks/task.py``, ``tokenizer.py``; ``core/models.py``'s
``load_tokenizer``; ``trainer.load_start``): a user's checkpoint trains with its own tokenizer
and chat template, rewards read decoded text, bad folders are one line before ``--out`` is
touched, and the toolkit's word-level tokenizer gives the ids it gave before tasks spoke text.

Checkpoints come from ``tests/checkpoints.py`` (a Qwen2-style model with a byte-level BPE of 4,096
ids, EOS = pad = ``<|endoftext|>``, no BOS; ``chat=True`` adds a ChatML template).
"""

from __future__ import annotations

import inspect
import math
import random

import pytest

from tailtheory.cli import main
from tailtheory.core.models import checkpoint_fingerprint, load_tokenizer, tiny_lm
from tailtheory.engine.start.sft import pack_sft_batch, packed_lengths
from tailtheory.engine.tasks.task import CORRECT_REWARD, FORMAT_REWARD, TASKS, get_task
from tailtheory.engine.tasks.tokenizer import build_tokenizer, check_tokenizer
from tailtheory.engine.load import read_provenance
from tailtheory.engine.checkpoint import read_metrics
from tests.checkpoints import QWEN_VOCAB, user_checkpoint

FLAGS = ["--task", "kk", "--n-people", "2", "--prompts-per-step", "2", "--group-size", "2",
         "--quiet"]
"""Device ``auto``: a GPU where there is one (no recorded numbers here, only sane ones)."""


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return user_checkpoint(tmp_path_factory.mktemp("ckpt") / "bpe")


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    return user_checkpoint(tmp_path_factory.mktemp("ckpt") / "chat", chat=True)


def _task(folder, name="kk", vocab_size=None, **kw):
    tok = load_tokenizer(folder)
    return get_task(name, seed=0, tokenizer=tok, vocab_size=vocab_size or len(tok), **kw)


def _train(folder, out, *extra) -> int:
    return main(["train", "--model", str(folder), *FLAGS, "--out", str(out), *extra])


# --- a user's checkpoint trains --------------------------------------------------------------

@pytest.mark.parametrize("kind", ["bpe", "chat"])
def test_a_bpe_checkpoint_trains_from_the_cli(kind, request, tmp_path):
    """``tailtheory train --model PATH --task kk`` on a Qwen2 checkpoint with its own BPE (pad =
    EOS; with a chat template): 2 steps and a held-out evaluation, sane metrics, the checkpoint's
    fingerprint recorded."""
    folder, out = request.getfixturevalue(kind), tmp_path / "run"
    assert _train(folder, out, "--steps", "2", "--eval-every", "1", "--eval-n", "4") == 0
    lines = read_metrics(out)
    task = _task(folder, n_people=2)
    assert [m["step"] for m in lines] == [0, 1]
    for m in lines:
        assert math.isfinite(m["loss/policy"]) and math.isfinite(m["grad/norm"])
        assert 0.0 <= m["reward/mean"] <= 1.0 and 0.0 <= m["eval/accuracy"] <= 1.0
        assert 1 <= m["rollout/len_max"] <= task.max_response_len
    assert task.max_response_len == 2 * task.tokens_per_word + 1 > 3  # words x tokens, + EOS
    assert read_provenance(out)["checkpoint"] == checkpoint_fingerprint(folder)


def test_padding_rows_past_the_tokenizer_sample_and_score_zero(tmp_path):
    """A model of Qwen2.5's 151,936 rows with a 4,096-token tokenizer (the rows past it are
    padding): a random policy samples those ids, and the run goes on (reward 0, no crash)."""
    from tests.checkpoints import qwen_vocab_checkpoint

    folder = qwen_vocab_checkpoint(tmp_path / "qwen")
    out = tmp_path / "run"
    assert _train(folder, out, "--steps", "1", "--eval-every", "0") == 0
    (m,) = read_metrics(out)
    assert m["reward/mean"] == 0.0 and math.isfinite(m["loss/policy"])


# --- rewards read decoded text ---------------------------------------------------------------

def test_reward_reads_decoded_text(bpe):
    """Hand-made BPE responses: the right answer scores 1.0 however it is tokenized, a wrong one
    0.1, garbage 0, no EOS 0; padding (= EOS here) after the EOS is ignored; an id past the
    tokenizer's tokens (a padding row of the model) makes the answer unreadable, never invisible."""
    tok = load_tokenizer(bpe)
    task = _task(bpe, vocab_size=QWEN_VOCAB)
    eos = task.eos_id
    assert task.pad_id == eos and task.bos_id is None and not task.chat
    p = task.problems(4, seed=3)[0]
    wrong = " ".join("F" if w == "T" else "T" for w in p.answer.split())
    enc = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    assert task.reward(p, task.target_ids(p)).total == CORRECT_REWARD
    assert task.reward(p, enc(" " + p.answer) + [eos, eos, eos]).total == CORRECT_REWARD
    words = p.answer.split()
    unusual = enc(words[0]) + [i for w in words[1:] for i in enc("  " + w)] + [eos]
    assert unusual != task.target_ids(p) and task.reward(p, unusual).total == CORRECT_REWARD
    assert task.reward(p, enc(" " + wrong) + [eos]).total == FORMAT_REWARD
    assert task.reward(p, enc(" hello world") + [eos]).total == 0.0
    assert task.reward(p, enc(" " + p.answer)).total == 0.0                     # no EOS
    first, rest = p.answer.split(" ", 1)
    hidden = enc(" " + first) + [len(tok) + 7] + enc(" " + rest) + [eos]       # a padding row
    assert task.reward(p, hidden).total == 0.0
    assert task.reward(p, [QWEN_VOCAB - 1, eos]).total == 0.0


def test_chat_template_prompt_ids_are_apply_chat_templates(chat):
    """With a chat template the prompt is ``apply_chat_template`` of the prompt text as one user
    message with the generation prompt; the ideal response starts without a space and scores 1."""
    tok = load_tokenizer(chat)
    task = _task(chat, n_people=2)
    assert task.chat and task.eos_id == tok.convert_tokens_to_ids("<|im_end|>") != task.pad_id
    for p in task.problems(3, seed=1):
        want = tok.apply_chat_template([{"role": "user", "content": p.prompt}],
                                       add_generation_prompt=True)
        want = want["input_ids"] if hasattr(want, "keys") else want
        assert p.prompt_ids == list(want)
        assert task.target_ids(p)[:-1] == tok.encode(p.answer, add_special_tokens=False)
        assert task.reward(p, task.target_ids(p)).correct


def test_sft_lengths_do_not_compare_with_a_pad_that_is_eos(bpe):
    """pad = EOS: each packed row's length is prompt + target, EOS included (comparing with the
    pad id would drop the EOS)."""
    task = _task(bpe)
    probs = task.problems(4, seed=2)
    X, Y = pack_sft_batch(task, probs)
    want = [len(p.prompt_ids) + len(task.target_ids(p)) for p in probs]
    assert packed_lengths(Y).tolist() == want
    assert (X != task.pad_id).sum(-1).tolist() != want  # what the old code would have found


def test_check_tokenizer_passes_the_toolkits_own():
    check_tokenizer(build_tokenizer(512), 512)
    with pytest.raises(ValueError, match="more than the model's vocabulary"):
        check_tokenizer(build_tokenizer(512), 256)


# --- the word-level tokenizer: bitwise what it was -------------------------------------------

def _old_prompt_ids(tok, prompt: str) -> list[int]:
    """The encoding before tasks spoke text: ``<bos>`` then the words' ids."""
    return [tok.bos_token_id] + tok.encode(prompt, add_special_tokens=False)


WORD_LEVEL = build_tokenizer(512)


def _old_reward(task, problem, ids: list[int]) -> float:
    """The reward before tasks spoke text: the tokens before the first ``<eos>`` as words."""
    tok = WORD_LEVEL
    if tok.eos_token_id not in ids:
        return 0.0
    answer = task.final_answer(tok.convert_ids_to_tokens(ids[: ids.index(tok.eos_token_id)]))
    return 0.0 if answer is None else (CORRECT_REWARD if answer == problem.answer
                                       else FORMAT_REWARD)


OLD_MAX_RESPONSE_LEN = {("kk", 2): 3, ("kk", 3): 4, ("kk_trace", 2): 92, ("kk_trace", 3): 261,
                        ("chain_sum", None): 5}
"""``max_response_len`` of the tasks before they spoke text (the rollouts' ``max_new_tokens``)."""


@pytest.mark.parametrize("name, people", sorted(OLD_MAX_RESPONSE_LEN, key=str))
def test_word_level_tasks_give_the_ids_and_rewards_they_gave(name, people, tmp_path):
    """The toolkit's word-level tokenizer, built here or read back from a warm-start-like folder
    beside a Qwen2 model (where ``AutoTokenizer`` would pick Qwen's BPE class): the same prompt
    ids, target ids, response cap and rewards as the encoding before tasks spoke text."""
    kw = {} if people is None else {"n_people": people}
    tok = WORD_LEVEL
    folder = tmp_path / "warm"
    tiny_lm(vocab_size=512, hidden=16, layers=1, heads=2, kv_heads=1).save_pretrained(folder)
    tok.save_pretrained(folder)
    built = get_task(name, seed=0, **kw)
    loaded = get_task(name, seed=0, tokenizer=load_tokenizer(folder), vocab_size=512, **kw)
    rng = random.Random(0)
    for task in (built, loaded):
        assert task.max_response_len == OLD_MAX_RESPONSE_LEN[(name, people)]
        for p in task.problems(16, seed=7):
            assert p.prompt_ids == _old_prompt_ids(tok, p.prompt)
            assert task.target_ids(p) == tok.encode(task.target(p),
                                                    add_special_tokens=False) + [2]
            samples = [task.target_ids(p)] + [
                [rng.choice([rng.randrange(512), *task.target_ids(p)]) for _ in range(6)]
                for _ in range(20)]
            for ids in samples:
                assert task.reward(p, ids).total == _old_reward(task, p, ids)
    assert [p.prompt_ids for p in built.problems(8)] == [p.prompt_ids for p in
                                                         loaded.problems(8)]


def test_every_task_accepts_a_tokenizer():
    assert all("tokenizer" in inspect.signature(t).parameters for t in TASKS.values())


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "absent")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read the tokenizer"):
        load_tokenizer(tmp_path / "t")
