"""Knights and Knaves in words: rendering the generator's statements, solving them by the worked
search of the ``kk_trace`` task, and reading a response back.

The statements are reasoning-gym ``knights_knaves`` ``metadata["statements"]`` trees, e.g.
``('->', ('lying', 1), ('telling-truth', 0))``; person ``i`` telling the truth renders as
``Pi T``, lying as ``Pi F``, connectives as ``~ & | > =``, always parenthesised
(:func:`render_statement`). The search of :mod:`tailtheory.engine.tasks`' ``kk_trace``
(:func:`render_kk_trace`) tries the assignments of :func:`kk_assignments` in order and checks
person after person; :func:`parse_kk_trace` accepts the search for *any* value expressions and
returns the answer it ends on.
"""

from __future__ import annotations

import itertools

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


def render_kk_trace(statements) -> tuple[str, tuple[bool, ...]]:
    """``(trace words, solution)``: the search of the ``kk_trace`` task (module docstring).

    Tries the assignments of :func:`kk_assignments` in order; checks person after person until
    one's statement value differs from their hypothesised value (``no``); stops at the first
    assignment where every check says ``ok`` and repeats it after ``so``.
    """
    words: list[str] = []
    for h in kk_assignments(len(statements)):
        words += ["try", *(_TV[v] for v in h), ":"]
        for i, s in enumerate(statements):
            r = kk_truth(s, h)
            words += [f"P{i}", render_statement(s, h), "is", _TV[r], _VERDICT[r == h[i]]]
            if r != h[i]:
                break
        else:
            return " ".join(words + ["so", *(_TV[v] for v in h)]), h
    raise ValueError("no assignment satisfies every statement")


def parse_kk_trace(words: list[str], n: int, max_depth: int) -> str | None:
    """The answer (``T F T``) of a well-formed ``kk_trace`` response, else None.

    Well-formed: the search of :func:`render_kk_trace` for *some* value expressions (each of
    depth <= ``max_depth``): hypotheses in :func:`kk_assignments` order, checks ``P0``, ``P1``, ...
    whose ``is`` value evaluates their expression and whose verdict compares it with the person's
    hypothesised value, each attempt cut at its first ``no``, stopping at the first all-``ok``
    attempt, then ``so`` and that attempt's hypothesis. Only the value expressions are free.
    """
    pos = 0
    for h in kk_assignments(n):
        hyp = [_TV[v] for v in h]
        if words[pos: pos + n + 2] != ["try", *hyp, ":"]:
            return None
        pos += n + 2
        for i in range(n):
            if words[pos: pos + 1] != [f"P{i}"]:
                return None
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
