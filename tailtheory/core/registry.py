"""The claims registry: every claim id of ``docs/claims.md``, registered once, with a check.

A check is a pure function ``check(profile) -> Evidence``: it measures, then derives its
verdict from the numbers (never the other way round). ``profile`` is ``"quick"`` (seconds, the
default of ``make repro`` and the tests) or ``"thorough"`` (more samples, larger sweeps).

Each claim also records the verdict the ledger ``paper_repro.md`` carries (``expected``). The
tests run every quick check and fail when a measured verdict differs from it, so the ledger
cannot drift from the code; ``tailtheory verify`` exits non-zero when a check raises or a claim
expected to HOLD (or HOLD-UNDER its assumption) no longer does.

Claim checks live in ``tailtheory/<section>/claims.py`` (one per section of the claims) and
register themselves on import. This module names no section: :func:`all_claims` first loads the
package's catalog (:func:`load_catalog`, through the entry point group :data:`CATALOG_GROUP`),
which imports every section's registrations.

Example::

    @register("S2", paper="OTB", statement="||e_k - p||^2 = 1 - 2 p_k + sum_j p_j^2",
              expected=Verdict.HOLDS)
    def _s2(profile: str) -> Evidence:
        err = ...
        return Evidence(Verdict.HOLDS if err < ATOL_F64 else Verdict.REFUTED, {"max_err": err})
"""

from __future__ import annotations

import importlib.metadata
import re
import time
import traceback
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Callable

from tailtheory.core.io import REPO_ROOT
from tailtheory.core.measurements import PROFILES, recording, unrecorded


class Verdict(str, Enum):
    """The verdicts a check can reach; ``docs/claims.md`` says what each means. The last five
    are the trend kind (:data:`TREND_KIND`): an effect against model size, and a claim whose
    rows are still being measured."""

    HOLDS = "HOLDS"
    HOLDS_UNDER = "HOLDS-UNDER"
    REFUTED = "REFUTED"
    TOY_SCALE = "TOY-SCALE"
    NOT_REPRODUCED = "NOT-REPRODUCED"
    GROWS = "GROWS"
    SHRINKS = "SHRINKS"
    FLAT = "FLAT"
    UNRESOLVED = "UNRESOLVED"
    PENDING = "PENDING"

    def __str__(self) -> str:
        return self.value


TREND_KIND = (Verdict.GROWS, Verdict.SHRINKS, Verdict.FLAT, Verdict.UNRESOLVED, Verdict.PENDING)
"""Verdicts of a claim about a trend against model size (:mod:`tailtheory.ladder.claims`), and
PENDING: a claim whose rule needs rows not yet measured."""


@dataclass(frozen=True)
class Evidence:
    """What a check measured: its verdict, the numbers behind it, one line of context."""

    verdict: Verdict
    numbers: dict[str, float | int | str]
    note: str = ""
    """A counterexample, the assumption of a HOLDS-UNDER, or a deviation from the paper."""
    key: tuple = ()
    """The names of the numbers that decide the verdict, shown first by every report (empty:
    the first numbers that are not context, :meth:`key_items`)."""

    def key_items(self, limit: int = 4) -> list[tuple[str, object]]:
        """The numbers a report shows first: :attr:`key` in its order (all of it, even past
        ``limit``), else the first ``limit`` numbers that are not context (where and on what decoder it was measured, the superseded
        verdict)."""
        if self.key:   # an explicit key is shown whole
            return [(k, self.numbers[k]) for k in self.key if k in self.numbers][
                :max(limit, len(self.key))]
        context = ("measured on", "rollout decoder", "decoder")
        return [(k, v) for k, v in self.numbers.items()
                if k.split(":")[-1] not in context and "superseded" not in k][:limit]

    def with_numbers(self, extra: dict) -> "Evidence":
        """This evidence with ``extra`` added to its numbers (verdict and note unchanged)."""
        return replace(self, numbers={**self.numbers, **extra})

    def superseding(self, claim: str, key: str = "no-learning regime (superseded): verdict"
                    ) -> "Evidence":
        """This (learning-testbed) evidence, first numbered ``measured on: learn recipe``, with
        the verdict ``claim`` had in the superseded no-learning regime beside it under ``key``
        (recorded once, :func:`superseded`; never recomputed)."""
        return Evidence(self.verdict, {"measured on": "learn recipe", **self.numbers,
                                       "rollout decoder": LEARN_DECODER,
                                       key: superseded(claim)["verdict"]}, self.note, self.key)

    def beside(self, today: "Evidence", where: str = "matched recipe (papers' regime)",
               today_name: str = "learn recipe") -> "Evidence":
        """This evidence, measured on ``where`` (the ``matched`` recipe, whose sampled tokens sit
        in LOPTI's probability bins as the papers' models' do), with ``today``'s (the same check on
        the ``today_name`` testbed) beside it: its verdict and key numbers under ``today_name:``,
        its context (the superseded verdict) kept. The claim's verdict is this one: the
        papers' regime decides; ``today`` says whether the regime changed it."""
        mine = {"measured on": where, **{k: v for k, v in self.numbers.items()
                                         if k != "measured on"}}
        theirs = {f"{today_name}: verdict": str(today.verdict),
                  **{f"{today_name}: {k}": v for k, v in today.key_items()},
                  **{k: v for k, v in today.numbers.items() if "superseded" in k}}
        key = (self.key or tuple(k for k, _ in self.key_items()))[:3] + (f"{today_name}: verdict",)
        return Evidence(self.verdict, {**mine, **theirs}, self.note, key)


LEARN_DECODER = "fast"
"""The decoder the learning testbed rolls out with (the ``learn`` recipe's ``rollout_backend``:
the engine's own plain-torch forward, ``tailtheory.engine.rollout.fast``), named beside every verdict
measured there; V1, V2 and M7 name theirs (``hf``). A path name (``bf16``, ``kv``) means one
decoder within a claim; the two decoders are reported under their own names."""


SUPERSEDED = REPO_ROOT / "results" / "superseded" / "verdicts.json"
"""The no-learning regime's verdicts, as recorded when the claims moved to the learning testbed:
per claim its verdict, the numbers and note of its check then, and its stored runs (kept beside
it in ``results/superseded/``, their figures in ``figures/superseded/``). Nothing recomputes
them: GRPO did not learn on those runs (held-out accuracy drifted down in every arm)."""


def superseded(claim: str) -> dict:
    """The recorded no-learning verdict of ``claim`` (:data:`SUPERSEDED`): ``verdict``,
    ``numbers``, ``note`` and ``stored``."""
    import json

    record = json.loads(SUPERSEDED.read_text())
    if claim not in record:
        raise KeyError(f"no superseded verdict recorded for {claim!r}; recorded: "
                       f"{', '.join(sorted(record))}")
    return record[claim]


@dataclass(frozen=True)
class Claim:
    """One claim of ``docs/claims.md`` and the function that checks it."""

    id: str
    paper: str
    statement: str
    check: Callable[[str], Evidence]
    expected: Verdict
    """The verdict recorded in ``paper_repro.md``."""


@dataclass
class ClaimResult:
    """A claim after its check ran (or raised)."""

    claim: Claim
    evidence: Evidence | None
    seconds: float
    error: str | None = None
    traceback: str | None = field(default=None, repr=False)
    sources: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """``(name, command)`` of each stored measurement the check read or stored (``results/``)."""

    @property
    def verdict(self) -> str:
        return "ERROR" if self.evidence is None else self.evidence.verdict.value

    @property
    def failed(self) -> bool:
        """A check that raised, or a HOLDS / HOLDS-UNDER claim that no longer does."""
        if self.evidence is None:
            return True
        held = (Verdict.HOLDS, Verdict.HOLDS_UNDER)
        return self.claim.expected in held and self.evidence.verdict != self.claim.expected

    @property
    def drifted(self) -> bool:
        """The measured verdict differs from the ledger's."""
        return self.evidence is not None and self.evidence.verdict != self.claim.expected

    def to_json(self) -> dict:
        ev = self.evidence
        return {
            "id": self.claim.id, "paper": self.claim.paper, "statement": self.claim.statement,
            "verdict": self.verdict, "expected": self.claim.expected.value,
            "numbers": {} if ev is None else dict(ev.numbers),
            "note": "" if ev is None else ev.note,
            "seconds": round(self.seconds, 3), "error": self.error,
        }


_REGISTRY: dict[str, Claim] = {}
_ID = re.compile(r"^[A-Z]\d{1,2}$")


def register(claim_id: str, *, paper: str, statement: str, expected: Verdict):
    """Decorator: register ``fn(profile) -> Evidence`` as the check of ``claim_id``."""
    if not _ID.match(claim_id):
        raise ValueError(f"claim id {claim_id!r} must look like 'M3' (a letter and a number)")

    def wrap(fn: Callable[[str], Evidence]) -> Callable[[str], Evidence]:
        if claim_id in _REGISTRY:
            raise ValueError(f"claim {claim_id} is registered twice")
        _REGISTRY[claim_id] = Claim(claim_id, paper, statement, fn, Verdict(expected))
        return fn

    return wrap


CATALOG_GROUP = "tailtheory.catalog"
"""The entry point group whose modules register claims, methods and studies on import (the
package's own is :mod:`tailtheory.catalog`; another package may add its own)."""

_catalog = "unloaded"
"""``"unloaded"``, ``"loading"`` (a registration module is being imported) or ``"loaded"``."""


def load_catalog() -> None:
    """Import every module of the entry point group :data:`CATALOG_GROUP`, once.

    Each registers its claims, methods and studies on import. A lookup made while they are
    being imported (a registration module asking a registry) sees what is registered so far.
    No module in the group means the package is not installed, a ``RuntimeError`` that says how
    to install it (the registries would otherwise be silently empty).
    """
    global _catalog
    if _catalog != "unloaded":
        return
    found = importlib.metadata.entry_points(group=CATALOG_GROUP)
    if not found:
        raise RuntimeError(f"no module of the entry point group {CATALOG_GROUP!r} is installed, "
                           "so no claim, method or study is registered: install the package "
                           "(`pip install -e .` in the checkout, or `make test`)")
    _catalog = "loading"
    try:
        for entry in sorted(found, key=lambda e: e.name):
            entry.load()
    except BaseException:
        _catalog = "unloaded"
        raise
    _catalog = "loaded"


def _sort_key(claim_id: str) -> tuple[int, int]:
    order = "SMPLTOV"  # the sections of the claims, in order (softmax ... tim)
    letter = claim_id[0]
    return (order.index(letter) if letter in order else len(order), int(claim_id[1:]))


def all_claims() -> dict[str, Claim]:
    """Every registered claim, in the order of the sections (S, M, P, L, T, O, V)."""
    load_catalog()
    return {k: _REGISTRY[k] for k in sorted(_REGISTRY, key=_sort_key)}


def select(only: list[str] | None = None) -> list[Claim]:
    """The claims named in ``only`` (all when ``None``); unknown ids raise, listing the valid ones."""
    claims = all_claims()
    if not only:
        return list(claims.values())
    unknown = [c for c in only if c not in claims]
    if unknown:
        raise ValueError(f"unknown claim id(s) {', '.join(unknown)}; registered: "
                         f"{', '.join(claims)}")
    return [claims[c] for c in sorted(set(only), key=_sort_key)]


UNRECORDED_NOTE = ("reads rows of an unrecorded model ({stores}: rows that name no model or no "
                   "machine); they are out of the verdict until measured again on a named model "
                   "({commands}); on them the check reads {verdict}")
"""The note of a verdict set aside (:func:`set_aside`)."""
CONTEXT_NOTE = ("numbers beside the verdict from {stores} are of an unrecorded model (rows that "
                "name no model or no machine): shown as context, not judged")
"""The note of a verdict whose context read an unrecorded store (:func:`set_aside`)."""


def set_aside(ev: Evidence, stores: list[str], context: list[str] = ()) -> Evidence:
    """``ev`` unchanged when ``stores`` (the unrecorded stores its verdict rests on,
    :func:`~tailtheory.core.measurements.unrecorded`) is empty; else PENDING, its numbers kept
    for context with ``verdict_on_unrecorded_rows`` and ``unrecorded_stores`` first, the note
    naming the stores and the commands that measure them again (``tailtheory measure NAME``). A
    model that cannot be named cannot be told from another build of its config, so no verdict
    rests on it. ``context``: unrecorded stores read only as context
    (:func:`~tailtheory.core.measurements.as_context`): the verdict stands, the note names them
    (:data:`CONTEXT_NOTE`)."""
    extra = sorted(set(context) - set(stores))
    if extra:
        ev = replace(ev, note="; ".join(x for x in (ev.note, CONTEXT_NOTE.format(
            stores=", ".join(extra))) if x))
    if not stores:
        return ev
    names = sorted(set(stores))
    note = UNRECORDED_NOTE.format(stores=", ".join(names),
                                  commands="; ".join(f"`tailtheory measure {n}`" for n in names),
                                  verdict=ev.verdict.value)
    numbers = {"verdict_on_unrecorded_rows": ev.verdict.value,
               "unrecorded_stores": ", ".join(names), **ev.numbers}
    return Evidence(Verdict.PENDING, numbers, f"{note}. {ev.note}".strip() if ev.note else note,
                    key=("verdict_on_unrecorded_rows", "unrecorded_stores"))


def run_claim(claim: Claim, profile: str = "quick") -> ClaimResult:
    """Run one check, timing it and catching its exception into the result; a verdict that read
    rows of an unrecorded model is set aside (:func:`set_aside`: PENDING)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    t0 = time.perf_counter()
    with recording() as sources:
        try:
            ev = claim.check(profile)
            if not isinstance(ev, Evidence):
                raise TypeError(f"check of {claim.id} returned {type(ev).__name__}, not Evidence")
            ev = set_aside(ev, [n for n in sorted(sources.deciding) if unrecorded(n)],
                           [n for n in sorted(sources.context) if unrecorded(n)])
            return ClaimResult(claim, ev, time.perf_counter() - t0, sources=tuple(sources))
        except Exception as exc:  # a failing check is reported, not fatal to the others
            return ClaimResult(claim, None, time.perf_counter() - t0,
                               error=f"{type(exc).__name__}: {exc}",
                               traceback=traceback.format_exc(), sources=tuple(sources))


def pick(profile: str, quick, thorough):
    """``quick`` or ``thorough`` by profile: the one place sizes depend on the profile."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    return quick if profile == "quick" else thorough


__all__ = ["Verdict", "Evidence", "Claim", "ClaimResult", "register", "all_claims", "select",
           "run_claim", "pick", "PROFILES"]
