"""What ``make repro`` regenerated against the committed ``figures/``: verdicts, numbers, files.

Bitwise equality holds for the same code on one CPU kind only (STYLE 20): MKL and oneDNN choose
kernels, hence reduction orders, by instruction set, and the bf16 / fp16 paths turn a last-bit
difference into a second-digit one (M7's ``random/fp16/max_ratio_exact``: 0.985 committed, 0.947
on an AMD CPU). So ``make repro`` writes into the ignored ``build/repro/`` and this module compares
that folder with the committed one, which stays the reference (``make figures`` rewrites it):

- **verdicts** of ``claims.json`` must be identical: a changed verdict, or a claim on one side
  only, is a failure (exit status 1);
- **numbers** of ``claims.json`` may move across CPUs: each one outside :data:`NUMBER_RTOL` /
  :data:`NUMBER_ATOL` is listed, committed against here, with its relative change
  :func:`rel_change`; the others that moved are counted;
- **CSVs** and **PNGs**: compared byte for byte and listed when they differ (a CSV with how many
  cells differ and by how much).

    python -m tailtheory.core.repro figures build/repro    # reference, then regenerated
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import numbers as _numbers
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tailtheory.core.checks import ATOL_F64

NUMBER_RTOL = 1e-4
"""Relative tolerance of a ``claims.json`` number across CPUs: the one measured for float32
metrics across instruction sets (``FLOAT32_RTOL`` of ``tests/engine/test_trainer.py``: at most
8.8e-6 after 3 AdamW steps, tolerance ten times that). A number outside it is listed, not failed."""

NUMBER_ATOL = ATOL_F64
"""Absolute tolerance: a difference below it is float64 round-off of a number near zero
(S4's slacks of -2.2e-16 and -1.1e-16), whatever its relative size."""

FIELDS = ("paper", "statement", "expected", "note", "error", "profile")
"""Fields of a ``claims.json`` entry besides ``verdict`` and ``numbers``: a change is listed."""


def rel_change(a: float, b: float) -> float:
    """``|b - a| / max(|a|, |b|)``: symmetric, at most 2, and 0 when both are 0."""
    scale = max(abs(a), abs(b))
    return abs(b - a) / scale if scale else 0.0


def _is_number(v) -> bool:
    return isinstance(v, _numbers.Real) and not isinstance(v, bool)


def _same(x, y) -> bool:
    """Equal values, NaN counting as equal to NaN (``json`` writes and reads it)."""
    return x == y or (_is_number(x) and _is_number(y) and math.isnan(x) and math.isnan(y))


@dataclass(frozen=True)
class Change:
    """One value of ``claims.json`` that differs: ``None`` on the side that lacks it."""

    claim: str
    key: str
    committed: object
    here: object

    @property
    def rel(self) -> float | None:
        """:func:`rel_change` of two numbers; ``None`` otherwise (strings, a missing side)."""
        if _is_number(self.committed) and _is_number(self.here):
            return rel_change(float(self.committed), float(self.here))
        return None

    @property
    def beyond(self) -> bool:
        """Outside the tolerance (any change that is not between two numbers is)."""
        if self.rel is None:
            return True
        return not math.isclose(self.committed, self.here, rel_tol=NUMBER_RTOL,
                                abs_tol=NUMBER_ATOL)

    def __str__(self) -> str:
        a, b = _excerpts(self.committed, self.here)
        rel = "" if self.rel is None else f", relative change {self.rel:.2g}"
        return f"{self.claim} {self.key}: committed {a}, here {b}{rel}"


def _excerpts(a, b, context: int = 20) -> tuple[str, str]:
    """``repr`` of two values; of two long strings, only the part that differs (with context)."""
    if not (isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > 4 * context):
        return repr(a), repr(b)
    n = min(len(a), len(b))
    i = 0                                       # common prefix
    while i < n and a[i] == b[i]:
        i += 1
    j = 0                                       # common suffix, apart from the prefix
    while j < n - i and a[-1 - j] == b[-1 - j]:
        j += 1

    def cut(t: str) -> str:
        lo, hi = max(0, i - context), len(t) - max(0, j - context)
        return ("..." if lo else "") + repr(t[lo:hi]) + ("..." if hi < len(t) else "")

    return cut(a), cut(b)


@dataclass
class Comparison:
    """Everything that differs between the reference folder and the regenerated one."""

    claims: int = 0
    verdicts: list[Change] = field(default_factory=list)
    numbers: list[Change] = field(default_factory=list)  # every number that moved
    n_numbers: int = 0
    fields: list[Change] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # name -> what differs ("" for a PNG)
    missing: list[str] = field(default_factory=list)     # committed, not regenerated
    extra: list[str] = field(default_factory=list)       # regenerated, not committed

    @property
    def ok(self) -> bool:
        """Same verdicts for the same claims (numbers and files may differ)."""
        return not self.verdicts

    @property
    def beyond(self) -> list[Change]:
        return [c for c in self.numbers if c.beyond]

    @property
    def max_rel(self) -> float:
        """Largest relative change of a number that moved by more than :data:`NUMBER_ATOL`."""
        rels = [c.rel for c in self.numbers if c.rel is not None and not math.isnan(c.rel)
                and abs(float(c.here) - float(c.committed)) > NUMBER_ATOL]
        return max(rels, default=0.0)


def compare_claims(ref: dict, here: dict, out: Comparison) -> None:
    """Fill ``out``'s verdicts, numbers and fields from two parsed ``claims.json``."""
    a = {c["id"]: c for c in ref["claims"]}
    b = {c["id"]: c for c in here["claims"]}
    ids = list(a) + [k for k in b if k not in a]
    out.claims = len(ids)
    for cid in ids:
        ca, cb = a.get(cid, {}), b.get(cid, {})
        if ca.get("verdict") != cb.get("verdict"):  # a claim on one side only, too
            out.verdicts.append(Change(cid, "verdict", ca.get("verdict"), cb.get("verdict")))
        if not (ca and cb):
            continue
        na, nb = ca["numbers"], cb["numbers"]
        out.n_numbers += len(na.keys() | nb.keys())
        for key in list(na) + [k for k in nb if k not in na]:
            if not _same(na.get(key), nb.get(key)) or (key in na) != (key in nb):
                out.numbers.append(Change(cid, key, na.get(key), nb.get(key)))
        out.fields += [Change(cid, f, ca.get(f), cb.get(f)) for f in FIELDS
                       if ca.get(f) != cb.get(f)]


def compare_csv(ref: str, here: str) -> str:
    """How two CSV texts differ, in a few words (cells that differ, largest relative change)."""
    ra, rb = list(csv.reader(ref.splitlines())), list(csv.reader(here.splitlines()))
    if ra[:1] != rb[:1]:
        return "columns differ"
    if len(ra) != len(rb) or any(len(x) != len(y) for x, y in zip(ra, rb)):
        return f"{len(ra) - 1} rows committed, {len(rb) - 1} here"
    cells = [(x, y) for row_a, row_b in zip(ra[1:], rb[1:]) for x, y in zip(row_a, row_b)]
    diff = [(x, y) for x, y in cells if x != y]
    rels = []
    for x, y in diff:
        try:
            rels.append(rel_change(float(x), float(y)))
        except ValueError:
            rels.append(math.inf)  # a label or a category changed
    worst = max(rels, default=0.0)
    by = "a non-number" if math.isinf(worst) else f"{worst:.2g}"
    return f"{len(diff)} of {len(cells)} cells, relative change up to {by}"


def _outputs(d: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(d.iterdir())
            if p.is_file() and p.suffix in (".png", ".csv", ".json") and not p.name.startswith(".")}


def compare_folders(reference: Path, here: Path) -> Comparison:
    """Compare ``claims.json``, every PNG and every CSV of ``here`` with ``reference``."""
    out = Comparison()
    compare_claims(json.loads((reference / "claims.json").read_text()),
                   json.loads((here / "claims.json").read_text()), out)
    a, b = _outputs(reference), _outputs(here)
    out.missing = [n for n in a if n not in b]
    out.extra = [n for n in b if n not in a]
    for name in (n for n in a if n in b):
        if a[name].read_bytes() != b[name].read_bytes():
            out.files[name] = (compare_csv(a[name].read_text(), b[name].read_text())
                               if name.endswith(".csv") else "")
    return out


def summary(c: Comparison, reference: str, here: str) -> str:
    """The one-line conclusion."""
    verdicts = (f"same verdicts ({c.claims} claims)" if c.ok else
                f"VERDICTS DIFFER for {', '.join(v.claim for v in c.verdicts)}")
    if not c.numbers:
        numbers = f"all {c.n_numbers} numbers equal"
    else:
        numbers = (f"{len(c.numbers)} of {c.n_numbers} numbers moved by at most {c.max_rel:.2g}"
                   f" relative ({len(c.beyond)} beyond the tolerance)")
    files = (f"these files differ: {', '.join(c.files)}" if c.files else "no file differs")
    if c.missing:
        files += f"; not regenerated: {', '.join(c.missing)}"
    if c.extra:
        files += f"; not committed: {', '.join(c.extra)}"
    return (f"{verdicts}; {numbers}; {files}; the committed {reference} are the reference, "
            f"regenerated ones are in {here}")


def report(c: Comparison, reference: str, here: str) -> str:
    """Every difference, section by section, then :func:`summary`."""
    lines = [f"== comparing {here} (regenerated) with {reference} (committed, the reference)"]
    if c.verdicts:
        lines += ["verdicts that differ (a failure):"] + [f"  {v}" for v in c.verdicts]
    if c.beyond:
        lines.append(f"numbers of claims.json beyond the tolerance (relative {NUMBER_RTOL:g}, "
                     f"absolute {NUMBER_ATOL:g}; numbers may move across CPUs, verdicts may not):")
        lines += [f"  {n}" for n in c.beyond]
    if c.fields:
        lines += ["other fields of claims.json that differ:"] + [f"  {f}" for f in c.fields]
    csvs = {n: w for n, w in c.files.items() if n.endswith(".csv")}
    if csvs:
        lines += ["CSVs that differ:"] + [f"  {n}: {w}" for n, w in csvs.items()]
    pngs = [n for n in c.files if n.endswith(".png")]
    if pngs:
        lines += ["PNGs that differ:"] + [f"  {n}" for n in pngs]
    return "\n".join(lines + [summary(c, reference, here)])


def _shown(p: Path) -> str:
    rel = os.path.relpath(p.resolve(), Path.cwd())
    return str(p) if rel.startswith("..") else rel.rstrip("/") + "/"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tailtheory.core.repro",
                                 description="Compare regenerated figures and claims.json with "
                                             "the committed ones (exit 1 when a verdict differs).")
    ap.add_argument("reference", type=Path, help="the committed folder (figures/)")
    ap.add_argument("here", type=Path, help="the regenerated folder (build/repro/)")
    args = ap.parse_args(argv)
    for d in (args.reference, args.here):
        if not (d / "claims.json").is_file():
            print(f"error: {d / 'claims.json'} not found (make repro writes it)", file=sys.stderr)
            return 2
    c = compare_folders(args.reference, args.here)
    print(report(c, _shown(args.reference), _shown(args.here)))
    return 0 if c.ok else 1


if __name__ == "__main__":
    sys.exit(main())
