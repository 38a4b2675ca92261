"""A notebook as its reader sees it: executed through a real Jupyter kernel (nbclient), every
figure cell shows its figures as images and the verdict cell renders an HTML table.

Notebook 01 (about 20 s on a 2-core CPU) stands for all: every notebook makes its figures with
``show_figure`` and opens with ``verdict_report``. Its explorer runs as a widget, as in
JupyterLab. Every wait on the kernel is bounded (``notebook_kernel.KERNEL_LIMITS``: 2 minutes a
cell), and the conftest fixes nbclient's lost wake-up after an explorer's cell."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from notebook_kernel import KERNEL_LIMITS

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.fixture(scope="module")
def executed_01(tmp_path_factory):
    figures = tmp_path_factory.mktemp("figures")
    nb = nbformat.read(NB_DIR / "01_token_tail.ipynb", as_version=4)
    env = dict(os.environ, TAILTHEORY_FIGURES=str(figures), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("TAILTHEORY_PRESET", None)
    env.pop("MPLBACKEND", None)  # the kernel's own backend, as in JupyterLab
    NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}},
                   **KERNEL_LIMITS).execute(env=env)
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
