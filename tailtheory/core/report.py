"""Printing claim results as a table, the notebooks' verdict report, and writing ``claims.json``.

Timings go to the printed table only: ``claims.json`` is tracked, so it holds what the code
computes (verdicts, numbers, notes) and nothing that changes from run to run; the same code and
profile write the same bytes.
"""

from __future__ import annotations

import html
import json
import numbers as _numbers
from pathlib import Path

from tailtheory.core.io import atomic_write_json, check_out_file
from tailtheory.core.registry import ClaimResult
from tailtheory.core.registry import _sort_key


def fmt_number(v, digits: int = 3) -> str:
    """``digits`` significant digits for floats (NumPy's too); integers and strings as they are."""
    if isinstance(v, (bool, str)) or isinstance(v, _numbers.Integral):
        return str(v)
    try:
        return f"{float(v):.{digits}g}"
    except (TypeError, ValueError):
        return str(v)


def key_numbers(evidence, limit: int = 4) -> str:
    """The deciding numbers of ``evidence`` (:meth:`~tailtheory.core.registry.Evidence.key_items`)
    as ``k=v`` pairs."""
    return ", ".join(f"{k}={fmt_number(v)}" for k, v in evidence.key_items(limit))


def table(results: list[ClaimResult]) -> str:
    """A fixed-width table: id, paper, verdict, key numbers, seconds."""
    rows = [("id", "paper", "verdict", "key numbers", "s")]
    for r in results:
        verdict = r.verdict + (f" (ledger: {r.claim.expected})" if r.drifted else "")
        nums = r.error if r.evidence is None else key_numbers(r.evidence)
        rows.append((r.claim.id, r.claim.paper, verdict, nums, f"{r.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4].rjust(6))
        if i == 0:
            lines.append("-" * (sum(widths) + 2 * 4 + 6))
    return "\n".join(lines)


KEY_NUMBERS = 4
"""How many of a check's numbers the verdict report shows (a check lists its key ones first)."""

VERDICT_STYLE = {
    "HOLDS": ("#d8f0dc", "#1b5e20"), "HOLDS-UNDER": ("#d8f0dc", "#1b5e20"),
    "TOY-SCALE": ("#e6f2d6", "#33691e"), "REFUTED": ("#f9d6d5", "#b71c1c"),
    "NOT-REPRODUCED": ("#fdebc8", "#8a5300"), "ERROR": ("#b71c1c", "#ffffff"),
}
"""Background and text colour of each verdict in the HTML report."""


def _short(v, width: int = 32) -> str:
    text = fmt_number(v, 4)
    return text if len(text) <= width else text[:width - 1] + "…"


def commands(result: ClaimResult, profile: str) -> list[tuple[str, str]]:
    """What regenerates a result: ``("check", the verify command)``, then ``("re-measure",
    command)`` for each stored measurement its check read."""
    out = [("check", f"tailtheory verify --only {result.claim.id} --profile {profile}")]
    for _, cmd in result.sources:
        if all(cmd != c for _, c in out):
            out.append(("re-measure", cmd))
    return out


class VerdictReport(list):
    """The notebooks' verdict report: a list of :class:`ClaimResult` that prints as text (script,
    CLI) and renders as an HTML table in Jupyter (``_repr_html_``)."""

    def __init__(self, results, profile: str = "quick"):
        super().__init__(results)
        self.profile = profile

    def _lines(self, r: ClaimResult) -> list[str]:
        lines = [f"{r.claim.id}  theory: {r.claim.statement}  (expected {r.claim.expected})"]
        if r.evidence is None:
            lines.append(f"    measured: ERROR  {r.error}")
        else:
            nums = r.evidence.numbers
            shown = ", ".join(f"{k}={_short(v)}" for k, v in r.evidence.key_items(KEY_NUMBERS))
            more = len(nums) - KEY_NUMBERS
            lines.append(f"    measured: {r.verdict}  {shown}"
                         + (f"  (+{more} more numbers)" if more > 0 else ""))
            if r.evidence.note:
                lines.append(f"    note: {r.evidence.note}")
        lines += [f"    {label}: {c}" for label, c in commands(r, self.profile)]
        return lines

    def __str__(self) -> str:
        return "\n".join(line for r in self for line in self._lines(r))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        e = html.escape
        cell = 'style="text-align:left;vertical-align:top;padding:4px 8px"'
        rows = []
        for r in self:
            bg, fg = VERDICT_STYLE.get(r.verdict, ("#eeeeee", "#000000"))
            verdict = (f'<span style="background:{bg};color:{fg};font-weight:bold;padding:1px 6px;'
                       f'border-radius:3px;white-space:nowrap">{e(r.verdict)}</span>')
            if r.drifted or r.evidence is None:
                verdict += f'<br><small>ledger: {e(str(r.claim.expected))}</small>'
            if r.evidence is None:
                key, folded = f"<code>{e(r.error or '')}</code>", ""
            else:
                items = list(r.evidence.numbers.items())
                key = "<br>".join(f"{e(k)} = <b>{e(_short(v))}</b>"
                                  for k, v in r.evidence.key_items(KEY_NUMBERS))
                full = "".join(f'<tr><td style="text-align:left"><code>{e(k)}</code></td>'
                               f'<td style="text-align:left">{e(fmt_number(v, 4))}</td></tr>'
                               for k, v in items)
                note = (f'<p style="max-width:60em">{e(r.evidence.note)}</p>'
                        if r.evidence.note else "")
                folded = (f"<details><summary>all {len(items)} numbers"
                          f"{' and the note' if note else ''}</summary>{note}"
                          f"<table>{full}</table></details>")
            cmds = "<br>".join(f"{label}: <code>{e(c)}</code>"
                               for label, c in commands(r, self.profile))
            rows.append(f"<tr><td {cell}><b>{e(r.claim.id)}</b><br><small>{e(r.claim.paper)}"
                        f"</small></td><td {cell}>{e(r.claim.statement)}</td>"
                        f"<td {cell}>{verdict}</td><td {cell}>{key}{folded}</td>"
                        f"<td {cell}>{cmds}</td></tr>")
        head = "".join(f"<th {cell}>{h}</th>" for h in
                       ("claim", "statement", "verdict", "key numbers", "regenerate"))
        return (f'<table class="tailtheory-verdicts"><thead><tr>{head}</tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table>'
                f'<p><small>profile <code>{e(self.profile)}</code>; verdicts as in '
                f'<code>paper_repro.md</code> unless a ledger verdict is shown.</small></p>')


RUN_NOISE = ("seconds",)
"""Keys of :meth:`ClaimResult.to_json` that change from run to run: left out of the file."""


JSON_DIGITS = 10
"""Significant digits of the floats ``claims.json`` keeps: last-bit differences between
library versions or CPUs (float64 round-off) do not change the file; the table and the
checks use the full values."""


def _rounded(x):
    """``x`` with every float (in dicts and lists, too) rounded to :data:`JSON_DIGITS`."""
    if isinstance(x, float):
        return float(f"{x:.{JSON_DIGITS}g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def claim_entry(result: ClaimResult, profile: str) -> dict:
    """The ``claims.json`` entry of one result: its JSON less :data:`RUN_NOISE`, floats to
    :data:`JSON_DIGITS` significant digits."""
    entry = {k: _rounded(v) for k, v in result.to_json().items() if k not in RUN_NOISE}
    return dict(entry, profile=profile)


def is_claims_json(path: Path) -> bool:
    """Whether ``path`` holds a ``claims.json`` this toolkit writes: a JSON object whose only key
    is ``claims``, a list of entries that each have a string ``id`` and a ``verdict``."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(doc, dict) and set(doc) == {"claims"} and isinstance(doc["claims"], list)
            and all(isinstance(c, dict) and isinstance(c.get("id"), str) and "verdict" in c
                    for c in doc["claims"]))


def write_claims_json(results: list[ClaimResult], path: Path, profile: str) -> Path:
    """Merge ``results`` into ``path`` (keeping other claims' entries) and write it atomically.

    Entries already in the file lose their :data:`RUN_NOISE` keys too, so an older file becomes
    deterministic on its first rewrite. A folder, or a file that is not a ``claims.json``
    (:func:`is_claims_json`), is a ``ValueError`` and left as it is."""
    path = check_out_file(path, is_claims_json)
    existing: dict[str, dict] = {}
    if path.exists():
        existing = {c["id"]: {k: v for k, v in c.items() if k not in RUN_NOISE}
                    for c in json.loads(path.read_text())["claims"]}
    for r in results:
        existing[r.claim.id] = claim_entry(r, profile)

    ordered = [existing[k] for k in sorted(existing, key=_sort_key)]
    return atomic_write_json(path, {"claims": ordered})
