"""``DIR/report.html``, its figures (PNG, each with its CSV) and ``DIR/summary.json``.

Source: the sections of :mod:`tailtheory.diagnose` (DVP arXiv 2512.23087, TRM arXiv 2512.23075,
TIM arXiv 2605.14220). The output folder is written whole or not at all: everything goes to a
temporary sibling folder, which then replaces ``DIR``. ``DIR`` must be missing, empty, or an
earlier diagnose output (it holds :data:`MARKER`); anything else is refused and left untouched.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from tailtheory.core.io import atomic_write_text, save_figure
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.base import Diagnosis, json_safe

MARKER = ".tailtheory-diagnose"
"""File that marks a folder as a diagnose output, which a later run may replace."""

def check_out(out: Path) -> None:
    """Raise ``ValueError`` unless ``out`` may be (re)written: missing, an empty folder, or a
    folder holding :data:`MARKER`."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; choose a new folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ValueError(f"--out {out} exists and is not a diagnose output (no {MARKER}); "
                         f"choose a new or empty folder, nothing was written")


def write_report(d: Diagnosis, out: str | os.PathLike, inputs: list[Path]) -> Path:
    """Write the report, figures, CSVs and ``summary.json`` into ``out`` all at once."""
    out = Path(out)
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.diagnose-"))
    try:
        figures = draw_all(d, tmp)
        atomic_write_text(tmp / "summary.json", json.dumps(json_safe(d.summary), indent=2) + "\n")
        atomic_write_text(tmp / "report.html", render_html(d, figures, inputs))
        atomic_write_text(tmp / MARKER, "written by tailtheory diagnose\n")
        os.chmod(tmp, 0o777 & ~_umask())
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "report.html"


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _swap(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out``; an earlier ``out`` is set aside first and deleted after."""
    check_out(out)
    if not out.exists():
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    os.rename(out, old / "x")
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old / "x", out)
        raise
    shutil.rmtree(old, ignore_errors=True)


# --- figures ----------------------------------------------------------------------------------

def draw_all(d: Diagnosis, directory: Path) -> dict[str, str]:
    """Draw every section of :data:`~tailtheory.diagnose.sections.SECTIONS` that has a figure
    and a table with rows, each with its CSV, and write the sections' further files; returns
    section -> PNG name."""
    matplotlib.use("Agg")
    drawn = {}
    for s in SECTIONS:
        if s.figure is not None and s.name in d.tables and len(d.tables[s.name]):
            fig, data = s.figure(d, plt)
            save_figure(fig, s.name, data, directory=directory)
            plt.close(fig)
            drawn[s.name] = f"{s.name}.png"
    for s in SECTIONS:
        for name, text in (s.files(d) if s.files is not None else {}).items():
            atomic_write_text(directory / name, text)
    return drawn


# --- HTML -------------------------------------------------------------------------------------

def render_html(d: Diagnosis, figures: dict[str, str], inputs: list[Path]) -> str:
    """The report: inputs, the summary, then each section's verdict lines, figure and CSV."""
    e = html.escape
    rows = "".join(f"<tr><td>{e(k)}</td><td>{e(_show(v))}</td></tr>"
                   for k, v in json_safe(d.summary).items()
                   if k not in ("m6", "dvp", "faults", "bottom_line", "certify", "seq_ratio",
                                "logged_ratio", "resume", "beyond_noise", "drift"))
    parts = [f"<h1>tailtheory diagnose</h1><p>{e(inputs_line(inputs))}</p>",
             f"<h2>Summary</h2><table>{rows}</table>"
             "<p>Delta = log pi_roll - log pi_train of the sampled token (inference minus "
             "trainer); p is the trainer's probability. Every key is defined in "
             "docs/diagnose.md.</p>"]
    for s in SECTIONS:
        name, title = s.name, s.title
        lines = "".join(f"<li>{e(x)}</li>" for x in d.verdicts.get(name, []))
        fig = (f'<p><img src="{figures[name]}" alt="{e(title)}"></p><p>data: '
               f'<a href="{name}.csv">{name}.csv</a></p>' if name in figures else "")
        parts.append(f"<h2>{e(title)}</h2><p>claims: {e(s.claims)}</p><ul>{lines}</ul>{fig}")
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "td{padding:0 1em;font-family:monospace}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>tailtheory diagnose"
            f"</title><style>{style}</style></head><body>{''.join(parts)}</body></html>\n")


INPUTS_SHOWN = 3
"""The report's header names this many dump files at each end of the list."""


def inputs_line(inputs: list[Path]) -> str:
    """The dumps read, in one line: their count, their common folder, and the first and last
    :data:`INPUTS_SHOWN` names relative to it (every name when there are at most
    ``2 * INPUTS_SHOWN``); ``summary.json`` has the count."""
    paths = [str(p) for p in inputs]
    if not paths:
        return "0 dumps."
    if len(paths) == 1:
        return f"1 dump: {paths[0]}"
    try:
        common = os.path.commonpath([os.path.abspath(p) for p in paths])
    except ValueError:                                  # different drives
        common = ""
    rel = [os.path.relpath(os.path.abspath(p), common) if common else p for p in paths]
    k = INPUTS_SHOWN
    names = (", ".join(rel) if len(rel) <= 2 * k else
             f"{', '.join(rel[:k])}, ... ({len(rel) - 2 * k} more) ..., {', '.join(rel[-k:])}")
    return f"{len(paths)} dumps" + (f" in {common}" if common else "") + f": {names}"


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return json.dumps(v) if isinstance(v, dict) else str(v)
