"""Reading the verdicts out of ``paper_repro.md``, the README's claims table and ``docs/claims.md``."""

from __future__ import annotations

import re
from pathlib import Path

_ROW = re.compile(r"^\|\s*([A-Z]\d{1,2})\s*\|")


def table_verdicts(markdown: str, verdict_column: int) -> dict[str, str]:
    """``{claim id: verdict}`` from every table row whose first cell is a claim id.

    ``verdict_column`` is the 0-based index of the verdict cell. Bold markers are stripped.
    """
    out: dict[str, str] = {}
    for line in markdown.splitlines():
        if not _ROW.match(line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        cid, verdict = cells[0], cells[verdict_column].replace("*", "").strip()
        if cid in out:
            raise ValueError(f"claim {cid} appears twice in the table")
        out[cid] = verdict
    return out


def ledger_verdicts(path: str | Path) -> dict[str, str]:
    """Verdicts of ``paper_repro.md``: columns id | paper | claim | verdict | ..."""
    return table_verdicts(Path(path).read_text(encoding="utf-8"), verdict_column=3)


def readme_verdicts(path: str | Path) -> dict[str, str]:
    """Verdicts of the README's claims table: columns id | paper | claim | verdict."""
    return table_verdicts(Path(path).read_text(encoding="utf-8"), verdict_column=3)


def docs_verdicts(path: str | Path) -> dict[str, str]:
    """Expected verdicts of ``docs/claims.md``'s registered-checks tables: columns id | paper |
    statement | expected verdict | check (the rows whose last cell names a check, ``file::name``)."""
    lines = Path(path).read_text(encoding="utf-8").replace("\\|", "/").splitlines()  # escaped |
    rows = [line for line in lines
            if _ROW.match(line) and "::" in line.strip().strip("|").split("|")[-1]]
    return table_verdicts("\n".join(rows), verdict_column=3)
