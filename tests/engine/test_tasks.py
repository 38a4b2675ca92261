"""Tests of ``tailtheory.engine.tasks`` and ``tailtheory.engine.tokenizer``.

The renderings are checked against the generators themselves: a Knights-and-Knaves prompt is
parsed back and solved by brute force (its unique solution must be the rendered answer), and the
rendered answers must score 1.0 with the generators' own ``score_answer``.
"""

import itertools

import pytest
import reasoning_gym
import torch
from hypothesis import given
from hypothesis import strategies as st

from tailtheory.engine.tasks import (CORRECT_REWARD, FORMAT_REWARD, TASKS, Problem, Reward,
                                     get_task, render_statement)
from tailtheory.engine.tokenizer import SPECIALS, WORDS, build_tokenizer, n_used


@pytest.fixture(scope="module")
def kk3():
    return get_task("kk", seed=0, n_people=3)


@pytest.fixture(scope="module")
def cs():
    return get_task("chain_sum", seed=0)


# --- tokenizer ---------------------------------------------------------------------------------

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


# --- registry and problems ---------------------------------------------------------------------

def test_unknown_task_lists_valid_names():
    with pytest.raises(ValueError, match="chain_sum.*kk"):
        get_task("sudoku")
    assert set(TASKS) == {"kk", "chain_sum"}


@pytest.mark.parametrize("name, kw, match", [
    ("kk", dict(n_people=1), "n_people"), ("kk", dict(n_people=7), "n_people"),
    ("kk", dict(depth_constraint=0), "depth_constraint"), ("kk", dict(seed=-1), "seed"),
    ("chain_sum", dict(min_terms=3, max_terms=2), "min_terms"),
    ("chain_sum", dict(max_digits=0), "max_digits"), ("kk", dict(vocab_size=8), "vocab_size")])
def test_bad_task_arguments(name, kw, match):
    with pytest.raises(ValueError, match=match):
        get_task(name, **kw)


@pytest.mark.parametrize("n, seed, match", [(0, 1, "n"), (2.5, 1, "n"), (4, -1, "seed")])
def test_bad_problem_arguments(kk3, n, seed, match):
    with pytest.raises(ValueError, match=match):
        kk3.problems(n, seed=seed)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_problems_are_seeded(name):
    task = get_task(name, seed=5)
    a, b = task.problems(16, seed=1), task.problems(16, seed=1)
    assert [p.prompt_ids for p in a] == [p.prompt_ids for p in b]
    assert [p.answer for p in a] == [p.answer for p in b]
    assert [p.prompt_ids for p in task.problems(16)] == [p.prompt_ids for p in
                                                         task.problems(16, seed=5)]
    other = task.problems(16, seed=2)
    assert [p.prompt_ids for p in a] != [p.prompt_ids for p in other]
    assert all(p.prompt_ids[0] == task.tokenizer.bos_token_id for p in a)
    assert all(len(task.target_ids(p)) <= task.max_response_len for p in a)


# --- rendering is faithful to the generators ---------------------------------------------------

def _parse(words: list[str]):
    """Parse a rendered statement back to a truth function of an assignment (reference)."""
    w = words.pop(0)
    if w == "~":
        inner = _parse(words)
        return lambda a: not inner(a)
    if w == "(":
        parts, ops = [_parse(words)], []
        while words[0] != ")":
            ops.append(words.pop(0))
            parts.append(_parse(words))
        words.pop(0)
        assert len(set(ops)) == 1, "a parenthesised group has one connective"
        f = {"&": lambda v: all(v), "|": lambda v: any(v), ">": lambda v: (not v[0]) or v[1],
             "=": lambda v: v[0] == v[1]}[ops[0]]
        return lambda a: f([p(a) for p in parts])
    who, val = int(w[1:]), words.pop(0)
    return lambda a: a[who] == (val == "T")


@pytest.mark.parametrize("n_people", [2, 3, 4])
def test_kk_rendering_has_the_generators_unique_solution(n_people):
    """Solving the rendered prompt by brute force gives exactly one assignment: the answer."""
    task = get_task("kk", n_people=n_people)
    for p in task.problems(40, seed=3):
        words = task.decode(p.prompt_ids[1:]).split()
        assert words[-1] == "?"
        claims = []
        for i, chunk in enumerate(" ".join(words[:-1]).split(" ;")[:-1]):
            head, body = chunk.split(" : ")
            assert head.strip() == f"P{i}"
            rest = body.split()
            claims.append(_parse(rest))
            assert rest == []
        sols = [a for a in itertools.product([True, False], repeat=n_people)
                if all(c(a) == a[i] for i, c in enumerate(claims))]
        assert len(sols) == 1
        assert " ".join("T" if v else "F" for v in sols[0]) == p.answer


def test_kk_answer_agrees_with_generator_score(kk3):
    """The rendered answer, spoken in the generator's words, scores 1.0; a flipped one < 1."""
    ds = reasoning_gym.create_dataset("knights_knaves", size=1, seed=0, n_people=3)
    for p in kk3.problems(20, seed=4):
        entry = {"answer": p.meta["rg_answer"]}

        def english(values):
            terms = p.meta["terms"]
            return ", ".join(f"{n} is {terms['a_knight'] if v == 'T' else terms['a_knave']}"
                             for n, v in zip(p.meta["names"], values))

        assert ds.score_answer(english(p.answer.split()), entry) == 1.0
        flipped = ["F" if v == "T" else "T" for v in p.answer.split()]
        assert ds.score_answer(english(flipped), entry) < 1.0


def test_chain_sum_answer_agrees_with_generator_score(cs):
    ds = reasoning_gym.create_dataset("chain_sum", size=1, seed=0)
    for p in cs.problems(50, seed=4):
        assert p.answer.replace(" ", "") == str(eval(p.meta["expression"]))
        assert ds.score_answer(p.answer.replace(" ", ""), {"answer": p.meta["rg_answer"]}) == 1.0
        words = cs.decode(p.prompt_ids[1:]).split()
        assert words[-1] == "=" and all(len(w) == 1 for w in words)


def test_render_statement_examples():
    assert render_statement(("->", ("lying", 1), ("telling-truth", 0))) == "( P1 F > P0 T )"
    assert render_statement(("not", ("and", ("lying", 2), ("telling-truth", 0),
                                     ("lying", 1)))) == "~ ( P2 F & P0 T & P1 F )"
    with pytest.raises(ValueError, match="operator"):
        render_statement(("xor", ("lying", 1), ("lying", 0)))


# --- rewards on hand-checked responses ---------------------------------------------------------

def _ids(task, text):
    return task.encode(text)


@pytest.mark.parametrize("text, expected", [
    ("T F T <eos>", Reward(CORRECT_REWARD, True, True)),
    ("T F T <eos> <pad> <pad>", Reward(CORRECT_REWARD, True, True)),
    ("T F T <eos> T T", Reward(CORRECT_REWARD, True, True)),      # after EOS: ignored
    ("T T T <eos>", Reward(FORMAT_REWARD, False, True)),
    ("F F F <eos>", Reward(FORMAT_REWARD, False, True)),
    ("T F T", Reward(0.0, False, False)),                          # no EOS
    ("T F <eos>", Reward(0.0, False, False)),                      # too short
    ("T F T T <eos>", Reward(0.0, False, False)),                  # too long
    ("T P0 T <eos>", Reward(0.0, False, False)),                   # not a truth value
    ("<eos>", Reward(0.0, False, False)),
    ("", Reward(0.0, False, False)),                               # empty response
    ("T F <unused_7> <eos>", Reward(0.0, False, False)),          # a tail token
])
def test_kk_reward_hand_checked(kk3, text, expected):
    p = Problem(prompt_ids=[1], answer="T F T", meta={})
    assert kk3.reward(p, _ids(kk3, text)) == expected
    assert kk3.reward(p, torch.tensor(_ids(kk3, text))) == expected


@pytest.mark.parametrize("text, answer, total", [
    ("1 5 <eos>", "1 5", 1.0), ("- 6 7 <eos>", "- 6 7", 1.0), ("0 <eos>", "0", 1.0),
    ("6 7 <eos>", "- 6 7", 0.1), ("0 <eos>", "4", 0.1),
    ("0 5 <eos>", "5", 0.0), ("- 0 <eos>", "0", 0.0), ("- <eos>", "- 1", 0.0),
    ("1 + 5 <eos>", "6", 0.0), ("1 5", "1 5", 0.0), ("- - 1 <eos>", "- 1", 0.0)])
def test_chain_sum_reward_hand_checked(cs, text, answer, total):
    r = cs.reward(Problem([1], answer, {}), _ids(cs, text))
    assert r.total == total and r.correct == (total == 1.0) and r.format_ok == (total > 0)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_target_ids_earn_full_reward(name):
    task = get_task(name)
    for p in task.problems(30, seed=7):
        assert task.reward(p, task.target_ids(p)) == Reward(CORRECT_REWARD, True, True)


@given(st.lists(st.integers(0, 511), max_size=8))
def test_reward_values_on_any_response(ids):
    """Every response earns one of the three documented values, consistently flagged."""
    r = _KK.reward(_KK_PROBLEM, ids)
    assert r.total in (0.0, FORMAT_REWARD, CORRECT_REWARD)
    assert r.correct == (r.total == CORRECT_REWARD) and r.format_ok == (r.total > 0)


_KK = get_task("kk", n_people=3)
_KK_PROBLEM = Problem([1], "T F T", {})


@pytest.mark.parametrize("ids, match", [
    ([0, 512], r"\[0, 512\)"), ([-1], r"\[0, 512\)"), ([[5, 2]], "1-D"),
    (torch.tensor([0.5, 2.0]), "integer"), ([0.5, 2.0], "integer")])
def test_reward_bad_input(kk3, ids, match):
    with pytest.raises(ValueError, match=match):
        kk3.reward(_KK_PROBLEM, ids)


def test_chance_accuracy_of_format_only_guessing():
    """Guessing every well-formed kk answer uniformly is right with probability 2^-n."""
    assert get_task("kk", n_people=3).chance_accuracy == 1 / 8
    assert get_task("kk", n_people=2).chance_accuracy == 1 / 4
    task = get_task("kk", n_people=2)
    p = task.problems(1, seed=0)[0]
    answers = [" ".join(a) for a in itertools.product("TF", repeat=2)]
    hits = [task.reward(p, task.encode(a + " <eos>")).correct for a in answers]
    assert sum(hits) / len(hits) == task.chance_accuracy


def test_unknown_task_argument():
    with pytest.raises(ValueError, match="n_people"):
        get_task("chain_sum", n_people=3)
