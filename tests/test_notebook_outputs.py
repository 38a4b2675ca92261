"""A notebook as its reader sees it: executed by plain ``jupyter nbconvert --to notebook
--execute`` in a real Jupyter kernel, every figure cell shows its figures as images, the explorer
is a live widget and the verdict cell renders an HTML table.

Notebook 01 (about 20 s on a 2-core CPU) stands for all: every notebook makes its figures with
``show_figure`` and opens with ``verdict_report``. Its explorer runs as a widget, as in
JupyterLab; nothing is patched, so this is also the short check that an explorer's cell does not
stall a headless executor (the long one: ``test_notebook_kernel.py``, slow). Each cell is
limited to 2 minutes (``notebook_kernel.CELL_TIMEOUT_S``)."""

import pytest
from notebook_kernel import CELL_TIMEOUT_S, kernel_env, nbconvert_execute, widget_views


@pytest.fixture(scope="module")
def executed_01(tmp_path_factory):
    out = tmp_path_factory.mktemp("nbconvert")
    figures = out / "figures"
    nb, took = nbconvert_execute("01_token_tail", out, kernel_env(figures))
    assert took < CELL_TIMEOUT_S, f"notebook 01 took {took:.0f} s: a cell waited out its timeout"
    assert widget_views(nb) == 1, "the explorer runs as a widget"
    return nb, figures


def _outputs(cell, mime):
    return [o for o in cell.get("outputs", []) if mime in o.get("data", {})]


def test_every_figure_cell_shows_its_figures(executed_01):
    nb, figures = executed_01
    code = [c for c in nb.cells if c.cell_type == "code"]
    figure_cells = [c for c in code if "show_figure(fig" in c.source]
    assert len(figure_cells) >= 5
    for cell in figure_cells:
        images = _outputs(cell, "image/png")
        assert len(images) == cell.source.count("show_figure(fig"), cell.source
        captions = "".join(o["data"]["text/html"] for o in _outputs(cell, "text/html")
                           if "Saved as" in o["data"]["text/html"])
        assert "Evidence" in captions, "each figure says what it shows"
    shown = sum(c.source.count("show_figure(fig") for c in figure_cells)
    assert len(list(figures.glob("*.png"))) == len(list(figures.glob("*.csv"))) == shown
    for cell in code:  # no path reprs, no warnings, no errors
        for o in cell.get("outputs", []):
            assert o["output_type"] != "error", o
            assert not (o["output_type"] == "stream" and o["name"] == "stderr"), o["text"]
            assert "PosixPath" not in str(o.get("data", {}).get("text/plain", ""))


def test_verdict_cell_is_an_html_table(executed_01):
    nb, _ = executed_01
    cell = next(c for c in nb.cells if c.cell_type == "code" and "verdict_report(" in c.source)
    html = "".join(o["data"]["text/html"] for o in _outputs(cell, "text/html"))
    assert "<table" in html and "<details>" in html
    for cid in ("S4", "M3", "M7", "P4"):
        assert f"<b>{cid}</b>" in html
    assert "NOT-REPRODUCED" in html and "TOY-SCALE" in html
    assert "np.float64" not in html and "tailtheory verify --only M3" in html
