"""Knights and Knaves in words: rendering the generator's statements, solving them by the worked
search of the ``kk_trace`` task, and reading a response back.

The statements are reasoning-gym ``knights_knaves`` ``metadata["statements"]`` trees, e.g.
``('->', ('lying', 1), ('telling-truth', 0))``; person ``i`` telling the truth renders as
``Pi T``, lying as ``Pi F``, connectives as ``~ & | > =``, always parenthesised
(:func:`render_statement`). The search of :mod:`tailtheory.engine.tasks.task`' ``kk_trace``
(:func:`render_kk_trace`) tries the assignments of :func:`kk_assignments` in order and checks
person after person; :func:`parse_kk_trace` accepts the search for *any* value expressions and
returns the answer it ends on.

``kk_prose`` writes the same search as English might: every trace word (``try is ok no so``) is
drawn from a list of synonyms (:data:`PROSE_SYNONYMS`) with Zipf weights (:data:`PROSE_ZIPF`),
and each attempt checks its people in a random order (:func:`render_kk_prose`). The choice has no
bearing on the answer, so a policy that imitates it keeps several plausible tokens at every such
slot: the spread of sampled probabilities a real LM's text has. :func:`parse_kk_trace` reads it
back with ``prose=True``.
"""

from __future__ import annotations

import itertools
import random

KK_CONNECTIVES = {"and": "&", "or": "|", "->": ">", "<=>": "="}
KK_ATOMS = {"telling-truth": "T", "lying": "F"}


def render_statement(s, values: tuple[bool, ...] | None = None) -> str:
    """Words of one generator statement tree, e.g. ``('->', ('lying', 1), ('telling-truth', 0))``
    -> ``( P1 F > P0 T )``; with an assignment ``values`` (person -> truthful) every atom becomes
    its truth value instead: ``(True, False)`` -> ``( T > T )``."""
    op = s[0]
    if op in KK_ATOMS:
        if values is None:
            return f"P{int(s[1])} {KK_ATOMS[op]}"
        return _TV[values[int(s[1])] == (op == "telling-truth")]
    if op == "not":
        return f"~ {render_statement(s[1], values)}"
    if op in KK_CONNECTIVES:
        return "( " + f" {KK_CONNECTIVES[op]} ".join(render_statement(x, values)
                                                    for x in s[1:]) + " )"
    raise ValueError(f"unknown Knights-and-Knaves operator {op!r}")


_TV = {True: "T", False: "F"}
_VERDICT = {True: "ok", False: "no"}
_KK_OPS = {"&": all, "|": any, ">": lambda v: (not v[0]) or v[1], "=": lambda v: v[0] == v[1]}
"""Truth functions of the rendered connectives on a list of operand values."""


def kk_truth(s, values: tuple[bool, ...]) -> bool:
    """Whether statement tree ``s`` holds under ``values`` (person -> truthful)."""
    op = s[0]
    if op in KK_ATOMS:
        return values[int(s[1])] == (op == "telling-truth")
    if op == "not":
        return not kk_truth(s[1], values)
    return _KK_OPS[KK_CONNECTIVES[op]]([kk_truth(x, values) for x in s[1:]])


def kk_assignments(n: int):
    """Every assignment of ``n`` people in the trace's order: all truthful first, ``F`` counting
    up from the last person (``T T``, ``T F``, ``F T``, ``F F``)."""
    return itertools.product((True, False), repeat=n)


PROSE_SYNONYMS = {
    "try": ("try", "suppose", "assume", "consider", "take", "say", "posit"),
    "is": ("is", "gives", "means", "yields", "equals", "makes"),
    "ok": ("ok", "fine", "good", "holds", "consistent", "agrees", "matches"),
    "no": ("no", "fails", "contradiction", "wrong", "clash", "impossible", "breaks"),
    "so": ("so", "hence", "thus", "therefore", "answer", "finally"),
}
"""``kk_prose``: the words that may stand for each trace word, the canonical one first. No word
stands for two."""

PROSE_ZIPF = 0.7
"""Exponent of the synonyms' weights: the ``k``-th (from 1) is drawn with weight ``k ** -0.7``, a
Zipf law as word frequencies follow in text (for 7 synonyms: 0.30, 0.19, 0.14, 0.11, 0.10, 0.09,
0.08; for 6: 0.32, 0.20, 0.15, 0.12, 0.11, 0.09), so about 70% of the words drawn have a chance
below 1/4, the lowest of LOPTI's probability bins."""

PROSE_WORDS = tuple(w for ws in PROSE_SYNONYMS.values() for w in ws[1:])
"""The synonyms that are not trace words themselves."""

_CANONICAL = {w: c for c, ws in PROSE_SYNONYMS.items() for w in ws}


def render_kk_trace(statements, rng: random.Random | None = None) -> tuple[str, tuple[bool, ...]]:
    """``(trace words, solution)``: the search of the ``kk_trace`` task (module docstring).

    Tries the assignments of :func:`kk_assignments` in order; checks person after person until
    one's statement value differs from their hypothesised value (``no``); stops at the first
    assignment where every check says ``ok`` and repeats it after ``so``. With ``rng`` each attempt
    checks its people in an order drawn from it (``kk_prose``), else ``P0``, ``P1``, ...
    """
    words: list[str] = []
    n = len(statements)
    for h in kk_assignments(n):
        words += ["try", *(_TV[v] for v in h), ":"]
        for i in (rng.sample(range(n), n) if rng else range(n)):
            s = statements[i]
            r = kk_truth(s, h)
            words += [f"P{i}", render_statement(s, h), "is", _TV[r], _VERDICT[r == h[i]]]
            if r != h[i]:
                break
        else:
            return " ".join(words + ["so", *(_TV[v] for v in h)]), h
    raise ValueError("no assignment satisfies every statement")


def render_kk_prose(statements, rng: random.Random) -> tuple[str, tuple[bool, ...]]:
    """``(prose words, solution)``: :func:`render_kk_trace` with its people in ``rng``'s order,
    then every trace word replaced by a synonym drawn with the :data:`PROSE_ZIPF` weights."""
    trace, h = render_kk_trace(statements, rng)
    return " ".join(_synonym(w, rng) for w in trace.split()), h


def _synonym(word: str, rng: random.Random) -> str:
    options = PROSE_SYNONYMS.get(word)
    if options is None:
        return word
    return rng.choices(options, [(k + 1) ** -PROSE_ZIPF for k in range(len(options))])[0]


def parse_kk_trace(words: list[str], n: int, max_depth: int, prose: bool = False) -> str | None:
    """The answer (``T F T``) of a well-formed ``kk_trace`` response, else None.

    Well-formed: the search of :func:`render_kk_trace` for *some* value expressions (each of
    depth <= ``max_depth``): hypotheses in :func:`kk_assignments` order, checks ``P0``, ``P1``, ...
    whose ``is`` value evaluates their expression and whose verdict compares it with the person's
    hypothesised value, each attempt cut at its first ``no``, stopping at the first all-``ok``
    attempt, then ``so`` and that attempt's hypothesis. Only the value expressions are free.
    ``prose``: the ``kk_prose`` form, where any synonym of :data:`PROSE_SYNONYMS` stands for a
    trace word and an attempt checks each person once, in any order.
    """
    if prose:
        words = [_CANONICAL.get(w, w) for w in words]
    pos = 0
    for h in kk_assignments(n):
        hyp = [_TV[v] for v in h]
        if words[pos: pos + n + 2] != ["try", *hyp, ":"]:
            return None
        pos += n + 2
        unchecked = [f"P{i}" for i in range(n)]
        for _ in range(n):
            person = words[pos] if pos < len(words) else None
            if person not in (unchecked if prose else unchecked[:1]):
                return None
            unchecked.remove(person)
            i = int(person[1:])
            r, pos = _read_value(words, pos + 1, max_depth)
            if r is None or words[pos: pos + 3] != ["is", _TV[r], _VERDICT[r == h[i]]]:
                return None
            pos += 3
            if r != h[i]:
                break
        else:
            return " ".join(hyp) if words[pos:] == ["so", *hyp] else None
    return None


def _read_value(words: list[str], pos: int, depth: int) -> tuple[bool | None, int]:
    """``(value, next position)`` of the value expression at ``words[pos]``; None if malformed
    (a connective group holds one connective; ``>`` and ``=`` take exactly two operands)."""
    w = words[pos] if pos < len(words) else None
    if w in ("T", "F"):
        return w == "T", pos + 1
    if depth <= 1 or w not in ("~", "("):
        return None, pos
    if w == "~":
        v, pos = _read_value(words, pos + 1, depth - 1)
        return (None if v is None else not v), pos
    vals, ops = [], []
    while True:
        v, pos = _read_value(words, pos + 1, depth - 1)
        nxt = words[pos] if pos < len(words) else None
        if v is None or nxt not in (*_KK_OPS, ")") or (ops and nxt not in (ops[0], ")")):
            return None, pos
        vals.append(v)
        if nxt == ")":
            break
        ops.append(nxt)
    if not ops or (ops[0] in (">", "=") and len(vals) != 2):
        return None, pos
    return _KK_OPS[ops[0]](vals), pos + 1


def kk_value_len(depth: int, width: int) -> int:
    """Longest value expression of a generator statement of ``depth`` and ``width`` (words):
    an atom is 1 word, ``~ x`` adds 1, a group of ``k`` operands adds ``k - 1`` connectives and
    2 parentheses (``k <= width`` for ``&``/``|``, ``k = 2`` for ``>``/``=``)."""
    if depth <= 1:
        return 1
    inner = kk_value_len(depth - 1, width)
    return max(1 + inner, *(k * inner + k + 1 for k in range(2, max(width, 2) + 1)))


ROLES = ("synonym", "order", "fork", "scaffold", "off_path", "junk")
"""What a word of a ``kk_trace`` / ``kk_prose`` response does (:func:`kk_word_roles`):
``synonym`` a free choice among a trace word's synonyms (``kk_prose``), ``order`` a free choice of
the next person to check when two or more are left (``kk_prose``), ``fork`` a truth value the
search computes (an atom of a value expression, the value after ``is``, or a verdict of the wrong
kind: alternatives the grammar admits lead to other values), ``scaffold`` a word the search
forces, ``off_path`` a word after the response left the grammar, ``junk`` a word the task never
writes (format-breaking)."""


def kk_word_roles(words: list[str], n: int, max_depth: int, prose: bool = False,
                  vocabulary=None) -> list[str]:
    """The role (:data:`ROLES`) of each word of a ``kk_trace`` (``prose``: ``kk_prose``)
    response, read along the grammar of :func:`parse_kk_trace`; ``vocabulary``: the task's
    words (a word outside them is ``junk``)."""
    roles = ["off_path"] * len(words)
    canon = [_CANONICAL.get(w, w) if prose else w for w in words]
    slot = "synonym" if prose else "scaffold"
    pos = 0

    def take(expected: str, role: str) -> bool:
        nonlocal pos
        if pos >= len(words) or canon[pos] != expected:
            return False
        roles[pos], pos = role, pos + 1
        return True

    def walk() -> None:
        nonlocal pos
        for h in kk_assignments(n):
            hyp = [_TV[v] for v in h]
            if not take("try", slot) or not all(take(v, "scaffold") for v in hyp) \
                    or not take(":", "scaffold"):
                return
            unchecked = [f"P{i}" for i in range(n)]
            for _ in range(n):
                person = words[pos] if pos < len(words) else None
                if person not in (unchecked if prose else unchecked[:1]):
                    return
                roles[pos] = "order" if prose and len(unchecked) > 1 else "scaffold"
                unchecked.remove(person)
                i, start = int(person[1:]), pos + 1
                r, pos = _read_value(words, start, max_depth)
                for k in range(start, pos):
                    roles[k] = "fork" if words[k] in _TV.values() else "scaffold"
                if r is None or not take("is", slot):
                    return
                if pos >= len(words) or words[pos] not in _TV.values():
                    return
                roles[pos], pos = "fork", pos + 1
                if words[pos - 1] != _TV[r]:
                    return
                verdict = _VERDICT[r == h[i]]
                if pos < len(canon) and canon[pos] in _VERDICT.values() and canon[pos] != verdict:
                    roles[pos] = "fork"
                    return
                if not take(verdict, slot):
                    return
                if r != h[i]:
                    break
            else:
                if take("so", slot):
                    all(take(v, "scaffold") for v in hyp)
                return

    walk()
    if vocabulary is not None:
        vocab = set(vocabulary)
        roles = ["junk" if w not in vocab else r for w, r in zip(words, roles)]
    return roles
