"""Notebooks are thin jupytext pairs: the .ipynb has its py:percent source's cells and takes a
PRESET parameter. Only sources are compared: a notebook run and saved in JupyterLab holds outputs
in the working tree, and nbstripout's git filter (.gitattributes; the Makefile's set-up installs
it) strips them when it is staged, so what git holds carries none."""

import json
import subprocess
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
    assert any("PRESET" in c for c in py_cells[:4]), "first cells must set PRESET"


def _staged(path: Path) -> str | None:
    """The file's text as git's index holds it (what the next commit takes), or None outside a
    git checkout or for a file git does not know yet."""
    root = NB_DIR.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "show", f":{path.relative_to(root)}"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_staged_notebook_has_no_outputs(src):
    ipynb = src.with_suffix(".ipynb")
    staged = _staged(ipynb)
    if staged is None:
        pytest.skip("not in a git checkout, or not staged yet")
    for c in json.loads(staged)["cells"]:
        if c["cell_type"] == "code":
            assert not c.get("outputs") and c.get("execution_count") is None, (
                f"{ipynb.name} was staged with outputs: the nbstripout filter is not installed "
                "(any make target installs it); `git add` it again")
