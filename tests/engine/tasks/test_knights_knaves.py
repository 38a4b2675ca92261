"""Tests of ``tailtheory.engine.tasks.knights_knaves``: rendering, the worked search and its parser.

Checked by hand on one puzzle, and against reasoning-gym's own evaluator and solutions on many.
"""

import pytest

from tailtheory.engine.tasks.knights_knaves import (kk_assignments, kk_truth, kk_value_len,
                                              parse_kk_trace, render_kk_trace, render_statement)
from tailtheory.engine.tasks.task import KK_TRACE_MAX_PEOPLE, get_task

# P0 : ~ P1 F ; P1 : ( P2 T & P2 F ) ; P2 : ( P0 T | P1 F ) ;   (unique solution F F T)
STATEMENTS = (("not", ("lying", 1)), ("and", ("telling-truth", 2), ("lying", 2)),
              ("or", ("telling-truth", 0), ("lying", 1)))
TRACE = ("try T T T : P0 ~ F is T ok P1 ( T & F ) is F no "
         "try T T F : P0 ~ F is T ok P1 ( F & T ) is F no "
         "try T F T : P0 ~ T is F no "
         "try T F F : P0 ~ T is F no "
         "try F T T : P0 ~ F is T no "
         "try F T F : P0 ~ F is T no "
         "try F F T : P0 ~ T is F ok P1 ( T & F ) is F ok P2 ( F | T ) is T ok so F F T")
"""Worked by hand: under T T T, P1 F is false so P0's ``~ P1 F`` is T = P0's T (ok); P1's
``( P2 T & P2 F )`` is ( T & F ) = F, but P1 is T (no); ... F F T passes every check."""


def test_render_kk_trace_by_hand():
    assert render_kk_trace(STATEMENTS) == (TRACE, (False, False, True))
    assert render_statement(STATEMENTS[2], (False, False, True)) == "( F | T )"
    assert [" ".join("T" if v else "F" for v in h) for h in kk_assignments(2)] == [
        "T T", "T F", "F T", "F F"]


def test_render_statement_examples():
    assert render_statement(("->", ("lying", 1), ("telling-truth", 0))) == "( P1 F > P0 T )"
    assert render_statement(("not", ("and", ("lying", 2), ("telling-truth", 0),
                                     ("lying", 1)))) == "~ ( P2 F & P0 T & P1 F )"
    with pytest.raises(ValueError, match="operator"):
        render_statement(("xor", ("lying", 1), ("lying", 0)))


MALFORMED = {
    "value": TRACE.replace("P1 ( T & F ) is F no", "P1 ( T & F ) is T no", 1),
    "verdict": TRACE.replace("P0 ~ T is F no", "P0 ~ T is F ok", 1),
    "skipped assignment": TRACE.replace("try T F F : P0 ~ T is F no ", ""),
    "goes on after no": TRACE.replace("P0 ~ T is F no", "P0 ~ T is F no P1 F is F ok", 1),
    "answer differs": TRACE[: -len("F F T")] + "F T T",
    "no answer": TRACE[: -len(" so F F T")],
    "words after answer": TRACE + " T",
    "person order": TRACE.replace("P0 ~ T is F ok P1", "P1 ~ T is F ok P0"),
    "mixed connectives": TRACE.replace("( T & F ) is F no", "( T & F | F ) is F no", 1),
    "binary with three": TRACE.replace("( F | T ) is T", "( F > T > T ) is T"),
    "too deep": TRACE.replace("P0 ~ T is F no", "P0 ~ ~ ~ F is T no", 1),
    "open group": TRACE.replace("( F | T ) is T", "( F | T is T"),
    "tail token": TRACE.replace("try T F T", "try T <unused_3> T"),
    "empty": "",
}


def test_parse_kk_trace_reads_the_answer_or_refuses():
    """The search's own words give its answer back; each malformed variant gives None."""
    assert parse_kk_trace(TRACE.split(), 3, 2) == "F F T"
    for why, text in MALFORMED.items():
        assert parse_kk_trace(text.split(), 3, 2) is None, why
    assert parse_kk_trace(TRACE.split(), 3, 1) is None      # depth 1 allows no ``~`` or group


@pytest.mark.parametrize("depth, width, longest", [
    (1, 2, 1), (2, 2, 5), (2, 3, 7), (3, 2, 13)])
def test_kk_value_len(depth, width, longest):
    """``( ( T & T ) & ( T & T ) )`` is the longest depth-3 width-2 expression: 13 words."""
    assert kk_value_len(depth, width) == longest


def test_kk_trace_derives_the_generators_answer():
    """On many seeds the search's answer is reasoning-gym's solution, every statement value in
    the trace agrees with the generator's own evaluator, and parsing the trace gives it back."""
    from reasoning_gym.logic.knights_knaves import KnightsKnavesDataset as KKD

    for n in range(2, KK_TRACE_MAX_PEOPLE + 1):
        task = get_task("kk_trace", n_people=n)
        for p in task.problems(60 if n < 4 else 20, seed=11):
            words = task.target(p).split()
            assert parse_kk_trace(words, n, 2) == p.answer
            assert p.answer.split() == ["T" if v else "F" for v in p.meta["solution"]]
            for h in kk_assignments(n):
                for s in p.meta["statements"]:
                    assert kk_truth(s, h) == bool(KKD.test_satisfiability(s, h))
            assert words.count("try") == 1 + list(kk_assignments(n)).index(p.meta["solution"])


# --- kk_prose: the same search with a choice of words and order ------------------------------

PROSE = ("suppose T T T : P1 ( T & F ) gives F fails "
         "try T T F : P0 ~ F is T fine P1 ( F & T ) is F wrong "
         "take T F T : P0 ~ T means F no "
         "try T F F : P0 ~ T is F no "
         "assume F T T : P0 ~ F is T clash "
         "try F T F : P0 ~ F is T no "
         "try F F T : P2 ( F | T ) is T holds P0 ~ T yields F ok P1 ( T & F ) is F good "
         "hence F F T")
"""The hand-worked puzzle in prose: synonyms throughout; under T T T P1 is checked first (and
fails), under F F T the order is P2, P0, P1."""


def test_parse_kk_prose_by_hand():
    assert parse_kk_trace(PROSE.split(), 3, 2, prose=True) == "F F T"
    assert parse_kk_trace(TRACE.split(), 3, 2, prose=True) == "F F T"    # the canonical form too
    assert parse_kk_trace(PROSE.split(), 3, 2) is None                  # not kk_trace's grammar


@pytest.mark.parametrize("old, new", [
    ("P2 ( F | T ) is T holds P0", "P2 ( F | T ) is T holds P2"),       # a person checked twice
    ("hence F F T", "hence F F T P1"),                                  # words after the answer
    ("gives F fails", "gives F holds"),                                 # verdict contradicts
    ("hence", "because"),                                               # not a synonym of so
    ("P1 ( T & F ) is F good", "P1 ( T & F ) is F"),                    # a check left out
])
def test_parse_kk_prose_refuses(old, new):
    assert old in PROSE
    assert parse_kk_trace(PROSE.replace(old, new, 1).split(), 3, 2, prose=True) is None


def test_synonyms_are_distinct_and_zipf_weighted():
    from collections import Counter
    import random

    from tailtheory.engine.tasks.knights_knaves import PROSE_SYNONYMS, PROSE_ZIPF, render_kk_prose

    every = [w for ws in PROSE_SYNONYMS.values() for w in ws]
    assert len(every) == len(set(every)) and all(c == ws[0] for c, ws in PROSE_SYNONYMS.items())
    rng = random.Random(0)
    counts = Counter(w for _ in range(400) for w in render_kk_prose(STATEMENTS, rng)[0].split()
                     if w in PROSE_SYNONYMS["try"])
    share = [counts[w] / sum(counts.values()) for w in PROSE_SYNONYMS["try"]]
    expected = [k ** -PROSE_ZIPF for k in range(1, 8)]
    expected = [e / sum(expected) for e in expected]                      # 0.30, 0.19, ...
    assert all(abs(s - e) < 0.03 for s, e in zip(share, expected)), share
    orders = Counter(tuple(w for w in render_kk_prose(STATEMENTS, rng)[0].split()
                           if w.startswith("P"))[-3:] for _ in range(300))
    assert len(orders) == 6                                               # every order of F F T


def test_render_kk_prose_solves_and_parses():
    import random

    from tailtheory.engine.tasks.knights_knaves import render_kk_prose

    task = get_task("kk_prose", n_people=3)
    for i, p in enumerate(task.problems(30, seed=5)):
        words, h = render_kk_prose(p.meta["statements"], random.Random(i))
        assert h == p.meta["solution"]
        assert parse_kk_trace(words.split(), 3, 2, prose=True) == p.answer


def test_word_roles_of_the_hand_trace():
    from tailtheory.engine.tasks.knights_knaves import kk_word_roles

    words = TRACE.split()
    roles = kk_word_roles(words, 3, 2)
    assert len(roles) == len(words) and set(roles) == {"scaffold", "fork"}
    # "try T T T : P0 ~ F is T ok": the atom and the value are forks, the rest forced
    assert roles[:11] == ["scaffold"] * 7 + ["fork", "scaffold", "fork", "scaffold"]
    assert roles[-4:] == ["scaffold"] * 4                 # "so F F T"


def test_word_roles_of_prose_and_of_errors():
    from tailtheory.engine.tasks.knights_knaves import ROLES, kk_word_roles

    prose = "suppose T T T : P1 ( T & F ) gives F clash".split()
    roles = kk_word_roles(prose, 3, 2, prose=True)
    assert roles[0] == "synonym" and roles[5] == "order"         # the person: 3 unchecked
    assert roles[-2:] == ["fork", "synonym"]                     # value, verdict of its kind
    wrong = kk_word_roles("try T T T : P0 ~ F is F".split(), 3, 2)
    assert wrong[-1] == "fork"                                   # the wrong value itself
    verdict = kk_word_roles("try T T T : P0 ~ F is T no try".split(), 3, 2)
    assert verdict[-2:] == ["fork", "off_path"]                  # wrong verdict, then lost
    junk = kk_word_roles("try T T banana".split(), 3, 2, vocabulary=("try", "T", ":"))
    assert junk == ["scaffold", "scaffold", "scaffold", "junk"]
    assert set(ROLES) >= set(roles + wrong + verdict + junk)
