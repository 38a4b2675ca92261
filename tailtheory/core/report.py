"""Printing claim results as a table and writing ``claims.json``.

Timings go to the printed table only: ``claims.json`` is tracked, so it holds what the code
computes (verdicts, numbers, notes) and nothing that changes from run to run; the same code and
profile write the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from tailtheory.core.io import atomic_write_json
from tailtheory.core.registry import ClaimResult


def fmt_number(v) -> str:
    """Three significant digits for floats, integers and strings as they are."""
    if isinstance(v, bool) or isinstance(v, (int, str)):
        return str(v)
    try:
        return f"{float(v):.3g}"
    except (TypeError, ValueError):
        return str(v)


def key_numbers(numbers: dict, limit: int = 4) -> str:
    """The first ``limit`` numbers as ``k=v`` pairs."""
    items = list(numbers.items())[:limit]
    return ", ".join(f"{k}={fmt_number(v)}" for k, v in items)


def table(results: list[ClaimResult]) -> str:
    """A fixed-width table: id, paper, verdict, key numbers, seconds."""
    rows = [("id", "paper", "verdict", "key numbers", "s")]
    for r in results:
        verdict = r.verdict + (f" (ledger: {r.claim.expected})" if r.drifted else "")
        nums = r.error if r.evidence is None else key_numbers(r.evidence.numbers)
        rows.append((r.claim.id, r.claim.paper, verdict, nums, f"{r.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4].rjust(6))
        if i == 0:
            lines.append("-" * (sum(widths) + 2 * 4 + 6))
    return "\n".join(lines)


RUN_NOISE = ("seconds",)
"""Keys of :meth:`ClaimResult.to_json` that change from run to run: left out of the file."""


def claim_entry(result: ClaimResult, profile: str) -> dict:
    """The ``claims.json`` entry of one result: its JSON less :data:`RUN_NOISE`."""
    entry = {k: v for k, v in result.to_json().items() if k not in RUN_NOISE}
    return dict(entry, profile=profile)


def write_claims_json(results: list[ClaimResult], path: Path, profile: str) -> Path:
    """Merge ``results`` into ``path`` (keeping other claims' entries) and write it atomically.

    Entries already in the file lose their :data:`RUN_NOISE` keys too, so an older file becomes
    deterministic on its first rewrite."""
    existing: dict[str, dict] = {}
    if path.exists():
        try:
            existing = {c["id"]: {k: v for k, v in c.items() if k not in RUN_NOISE}
                        for c in json.loads(path.read_text())["claims"]}
        except (ValueError, KeyError, TypeError):
            existing = {}  # an unreadable file is replaced, not merged
    for r in results:
        existing[r.claim.id] = claim_entry(r, profile)
    from tailtheory.core.registry import _sort_key

    ordered = [existing[k] for k in sorted(existing, key=_sort_key)]
    return atomic_write_json(path, {"claims": ordered})
