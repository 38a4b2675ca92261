"""The renders in docs/notebooks/ (``make render``) are current: each one's code cells are its
source notebook's, in order, and it was executed without an error. Nothing is executed here."""

from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "notebooks").glob("[0-9]*.py"))
RENDERS = ROOT / "docs" / "notebooks"


def _code(cells):
    return [c.source.strip() for c in cells if c.cell_type == "code"]


def test_one_render_per_notebook():
    names = {p.stem for p in SOURCES}
    stray = sorted(p.name for p in RENDERS.glob("*.ipynb") if p.stem not in names)
    assert not stray, f"renders without a notebook in notebooks/: {stray}; delete them"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_render_is_current(src):
    render = RENDERS / f"{src.stem}.ipynb"
    where = f"docs/notebooks/{render.name}"
    assert render.exists(), f"{where} missing: run `make render NB={src.stem[:2]}`"
    rendered = nbformat.read(render, as_version=4)
    source, shown = _code(jupytext.read(src).cells), _code(rendered.cells)
    if shown != source:
        first = next((i for i, (a, b) in enumerate(zip(source, shown)) if a != b),
                     min(len(source), len(shown)))
        pytest.fail(f"{where} is stale: its code cells differ from notebooks/{src.name} (first "
                    f"difference at code cell {first + 1}; {len(shown)} cells rendered, "
                    f"{len(source)} in the source). Run `make render NB={src.stem[:2]}` and "
                    "commit the render.", pytrace=False)
    code = [c for c in rendered.cells if c.cell_type == "code"]
    unrun = [i for i, c in enumerate(code) if c.execution_count is None]
    assert not unrun, f"{where}: code cells {unrun} were not executed: run `make render`"
    errors = [o.get("ename") for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{where} shows errors {errors}: fix the notebook, then `make render`"
    blank = [i for i, c in enumerate(code) if "show_figure(" in c.source
             and not any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert not blank, f"{where}: figure cells {blank} show no image: run `make render`"
    verdict = [c for c in code if "verdict_report(" in c.source]
    assert all(any("<table" in str(o.get("data", {}).get("text/html", "")) for o in c.outputs)
               for c in verdict), f"{where}: the verdict cell shows no HTML table"
    assert "jupytext" not in rendered.metadata, f"{where} is paired: Lab would write a .py"
