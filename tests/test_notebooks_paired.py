"""Notebooks are thin jupytext pairs: the .ipynb matches its py:percent source, carries no outputs,
and takes a PRESET parameter."""

from pathlib import Path

import jupytext
import pytest

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"
SOURCES = sorted(NB_DIR.glob("[0-9]*.py"))


def test_there_are_notebooks():
    assert SOURCES, "no notebooks/NN_*.py found"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_pair_in_sync_and_clean(src):
    ipynb = src.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: run `make sync`"
    py_cells = [c.source.strip() for c in jupytext.read(src).cells]
    nb = jupytext.read(ipynb)
    assert [c.source.strip() for c in nb.cells] == py_cells, f"{ipynb.name} out of sync: make sync"
    for c in nb.cells:
        if c.cell_type == "code":
            assert not c.get("outputs") and c.get("execution_count") is None, "outputs committed"
    assert any("PRESET" in c for c in py_cells[:4]), "first cells must set PRESET"
