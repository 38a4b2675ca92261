"""Regenerate the README's claims table from the ledger: ``python -m tailtheory.core.readme``.

The table sits between the ``<!-- claims-table ... -->`` and ``<!-- end claims-table -->`` markers;
its rows are id | paper | claim | verdict, copied from ``paper_repro.md``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tailtheory.core.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
_START = re.compile(r"(<!-- claims-table[^>]*-->\n)(.*?)(<!-- end claims-table -->)", re.S)


def ledger_rows(ledger: str) -> list[list[str]]:
    """The claim rows of the ledger, as cell lists."""
    rows = []
    for line in ledger.splitlines():
        if re.match(r"^\|\s*[A-Z]\d{1,2}\s*\|", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def render_table(rows: list[list[str]]) -> str:
    """Markdown table id | paper | claim | verdict."""
    out = ["| id | paper | claim | verdict |", "|---|---|---|---|"]
    out += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows]
    return "\n".join(out) + "\n"


def update_readme(readme: Path = ROOT / "README.md", ledger: Path = ROOT / "paper_repro.md") -> bool:
    """Rewrite the README's table from the ledger; returns whether anything changed."""
    text = readme.read_text(encoding="utf-8")
    table = render_table(ledger_rows(ledger.read_text(encoding="utf-8")))
    if not _START.search(text):
        raise ValueError(f"{readme} has no claims-table markers")
    new = _START.sub(lambda m: m.group(1) + table + m.group(3), text, count=1)
    if new != text:
        atomic_write_text(readme, new)
    return new != text


if __name__ == "__main__":
    changed = update_readme()
    print("README claims table", "updated" if changed else "already current")
    sys.exit(0)
