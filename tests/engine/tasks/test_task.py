"""Tests of ``tailtheory.engine.tasks.task``.

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

from tailtheory.engine.tasks.lengths import length_stats, target_lengths
from tailtheory.engine.tasks.task import (CORRECT_REWARD, FORMAT_REWARD, KK_TRACE_MAX_PEOPLE, TASKS,
                                     Problem, Reward, get_task)
from tailtheory.engine.tasks.tokenizer import WORDS
from tests.engine.tasks.test_knights_knaves import MALFORMED, TRACE


@pytest.fixture(scope="module")
def kk3():
    return get_task("kk", seed=0, n_people=3)


@pytest.fixture(scope="module")
def cs():
    return get_task("chain_sum", seed=0)


# --- registry and problems ---------------------------------------------------------------------

def test_unknown_task_lists_valid_names():
    """One error that names every registered task."""
    with pytest.raises(ValueError, match=r"unknown task 'sudoku'; valid tasks: "
                                         r"\['chain_sum', 'kk', 'kk_knights', 'kk_prose', "
                                         r"'kk_trace'\]"):
        get_task("sudoku")
    assert set(TASKS) == {"kk", "kk_trace", "kk_prose", "kk_knights", "chain_sum"}


@pytest.mark.parametrize("name, kw, match", [
    ("kk", dict(n_people=1), "n_people"), ("kk", dict(n_people=7), "n_people"),
    ("kk", dict(depth_constraint=0), "depth_constraint"), ("kk", dict(seed=-1), "seed"),
    ("chain_sum", dict(min_terms=3, max_terms=2), "min_terms"),
    ("chain_sum", dict(max_digits=0), "max_digits"), ("kk", dict(vocab_size=8), "vocab_size"),
    ("kk_trace", dict(n_people=KK_TRACE_MAX_PEOPLE + 1), "n_people"),
    ("kk_trace", dict(n_people=1), "n_people"), ("kk_trace", dict(width_constraint=0), "width")])
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


# --- kk_trace: worked search before the answer ------------------------------------------------

@pytest.fixture(scope="module")
def kkt():
    return get_task("kk_trace", seed=0)


def test_kk_trace_problem_by_hand(kkt):
    """The hand-worked puzzle of ``test_knights_knaves`` is the generator's first of seed 1."""
    p = kkt.problems(1, seed=1)[0]   # the generator's first problem of seed 1 is this puzzle
    assert kkt.decode(p.prompt_ids) == ("<bos> P0 : ~ P1 F ; P1 : ( P2 T & P2 F ) ; "
                                        "P2 : ( P0 T | P1 F ) ; ?")
    assert kkt.decode(kkt.target_ids(p)) == TRACE + " <eos>" and p.answer == "F F T"


def test_kk_trace_prompts_are_those_of_kk(kkt):
    kk = get_task("kk", seed=0)
    a, b = kk.problems(20, seed=3), kkt.problems(20, seed=3)
    assert [(p.prompt_ids, p.answer) for p in a] == [(p.prompt_ids, p.answer) for p in b]


_WRONG = "try T T T : P0 ~ F is T ok P1 ( T & T ) is T ok P2 ( T | F ) is T ok so T T T"
"""Well-formed but wrong: misreads P1's statement as ( T & T ) under T T T and stops there."""


@pytest.mark.parametrize("text, expected", [
    (TRACE + " <eos>", Reward(CORRECT_REWARD, True, True)),
    (TRACE + " <eos> <pad> T", Reward(CORRECT_REWARD, True, True)),     # after EOS: ignored
    (_WRONG + " <eos>", Reward(FORMAT_REWARD, False, True)),
    (TRACE, Reward(0.0, False, False)),                                 # truncated: no EOS
    (" ".join(TRACE.split()[:40]), Reward(0.0, False, False)),          # cut mid-trace
    (" ".join(TRACE.split()[:40]) + " <eos>", Reward(0.0, False, False)),
    ("F F T <eos>", Reward(0.0, False, False)),                          # the answer alone
    *[(t + " <eos>", Reward(0.0, False, False)) for t in MALFORMED.values()]],
    ids=["correct", "padding", "wrong", "no_eos", "cut", "cut_eos", "bare_answer",
         *[k.replace(" ", "_") for k in MALFORMED]])
def test_kk_trace_reward_hand_checked(kkt, text, expected):
    p = Problem(prompt_ids=[1], answer="F F T", meta={"trace": TRACE})
    assert kkt.reward(p, kkt.encode(text)) == expected


def test_kk_trace_answer_scores_with_the_generator(kkt):
    ds = reasoning_gym.create_dataset("knights_knaves", size=1, seed=0, n_people=3)
    for p in kkt.problems(30, seed=12):
        terms, names = p.meta["terms"], p.meta["names"]
        english = ", ".join(f"{nm} is {terms['a_knight'] if v == 'T' else terms['a_knave']}"
                            for nm, v in zip(names, kkt.target(p).split()[-3:]))
        assert ds.score_answer(english, {"answer": p.meta["rg_answer"]}) == 1.0


def test_kk_trace_target_lengths(kkt):
    """Over 200 problems: median >= 32 tokens, some over 128, all within ``max_response_len``."""
    lengths = target_lengths(kkt, kkt.problems(200, seed=13))
    st_ = length_stats(lengths)
    assert st_.median >= 32 and st_.max > 128 and st_.max <= kkt.max_response_len
    assert min(lengths) >= 25   # the shortest: T T T passes at once, 3 checks of >= 5 words


@pytest.mark.parametrize("kw", [dict(n_people=2), dict(n_people=3, width_constraint=3),
                                dict(n_people=3, depth_constraint=3)])
def test_kk_trace_other_sizes_round_trip(kw):
    task = get_task("kk_trace", **kw)
    for p in task.problems(40, seed=14):
        ids = task.target_ids(p)
        assert len(ids) <= task.max_response_len
        assert task.reward(p, ids) == Reward(CORRECT_REWARD, True, True)


@given(st.data())
def test_kk_trace_one_changed_word(data):
    """Changing one word of a target earns a documented value; a changed ``is`` value or first
    hypothesis value is always malformed (the grammar leaves only the value expressions free)."""
    words = TRACE.split()
    i = data.draw(st.integers(0, len(words) - 1))
    new = data.draw(st.sampled_from([w for w in WORDS if w != words[i]]))
    ids = _KKT.encode(" ".join(words[:i] + [new] + words[i + 1:]) + " <eos>")
    r = _KKT.reward(_KKT_PROBLEM, ids)
    assert r.total in (0.0, FORMAT_REWARD, CORRECT_REWARD)
    assert r.correct == (r.total == CORRECT_REWARD) and r.format_ok == (r.total > 0)
    if words[i - 1] in ("is", "try") or words[i] in ("try", "is", "ok", "no", "so", ":"):
        assert r.total == 0.0


_KKT = get_task("kk_trace")
_KKT_PROBLEM = Problem([1], "F F T", {"trace": TRACE})


# --- kk_prose: the search in words chosen from synonyms -----------------------------------

def test_kk_prose_targets_vary_and_score():
    task = get_task("kk_prose", n_people=2)
    problems = task.problems(40, seed=15)
    targets = [task.target(p) for p in problems]
    assert targets == [task.target(p) for p in problems]                  # drawn once per problem
    trace = get_task("kk_trace", n_people=2)
    assert sum(t != trace.target(p) for t, p in zip(targets, problems)) > 30
    for p in problems:
        assert len(task.target_ids(p)) <= task.max_response_len
        assert task.reward(p, task.target_ids(p)) == Reward(CORRECT_REWARD, True, True)
    assert task.tokenizer.encode(" consistent contradiction") != [task.tokenizer.unk_token_id] * 2


def test_kk_knights_names_the_truth_tellers_in_order():
    task = get_task("kk_knights", n_people=3)
    for p in task.problems(20, seed=5):
        named = [i for i, v in enumerate(p.meta["solution"]) if v]
        assert p.answer.split() == [f"P{i}" for i in named]
        assert task.reward(p, task.target_ids(p)).total == 1.0
    assert task.well_formed([]) and task.well_formed(["P0", "P2"])
    assert not task.well_formed(["P2", "P0"]) and not task.well_formed(["P1", "P1"])
    assert not task.well_formed(["P3"]) and not task.well_formed(["T"])
    assert task.chance_accuracy == 1 / 8
