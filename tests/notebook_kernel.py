"""Executing notebooks in a Jupyter kernel from the tests (``test_notebook_outputs.py``,
``test_notebook_kernel.py`` and nbmake's runs of ``notebooks/*.ipynb``): the limits every wait
gets, and plain ``jupyter nbconvert --execute`` as a user or a CI job runs it.

Nothing here patches nbclient. The explorers (``tailtheory.core.explore``) draw into an image
widget, not an Output widget, so nbclient's mimic of the Output widget, whose echo to the kernel
lost the wake-up of a cell's reply (a known lost wake-up in nbclient's Output-widget handling),
never runs: the tests execute the notebooks as every headless executor does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat

CELL_TIMEOUT_S = 120
"""Per-cell limit of the tests' own runs of notebooks 01-03 (``test_notebook_outputs.py``, the
nbconvert runs here): their slowest cell (01's verdict) takes 7 to 25 s on a busy 2-core CPU, so
a cell past 2 minutes is a hang. nbmake's runs keep the notebooks' own limit (their metadata's
``execution.timeout``, 300 s): with a cold run cache the training cells of notebooks 04 and 06
do up to 4.5 minutes of real work on such a machine."""

KERNEL_LIMITS = dict(
    timeout=CELL_TIMEOUT_S,  # waiting for a cell's execute_reply
    startup_timeout=60,  # waiting for the kernel's kernel_info reply after it starts
    iopub_timeout=30,  # after the execute_reply, waiting for the cell's outputs and "idle"
    raise_on_iopub_timeout=True,  # a lost "idle" fails, naming IOPub, instead of dropping outputs
)
"""nbclient ``NotebookClient`` settings: every wait ends within about 2 minutes, with an error
that names what it waited for."""

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def kernel_env(figures: Path, **extra: str) -> dict:
    """The environment of a notebook's kernel in the tests: offline, figures into ``figures``,
    the kernel's own plotting backend (as in JupyterLab), the notebook's own preset."""
    env = dict(os.environ, TAILTHEORY_FIGURES=str(figures), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", **extra)
    env.pop("TAILTHEORY_PRESET", None)
    env.pop("MPLBACKEND", None)
    return env


def nbconvert_execute(name: str, out_dir: Path, env: dict,
                      timeout: int = CELL_TIMEOUT_S) -> tuple[nbformat.NotebookNode, float]:
    """``jupyter nbconvert --to notebook --execute notebooks/<name>.ipynb`` in its own process (no
    patch of any kind loaded), each cell limited to ``timeout`` seconds; returns the executed
    notebook and the seconds the command took. A failed command raises with its last output."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
         str(NB_DIR / f"{name}.ipynb"), "--output-dir", str(out_dir),
         f"--ExecutePreprocessor.timeout={timeout}", "--ExecutePreprocessor.kernel_name=python3"],
        cwd=NB_DIR, env=env, capture_output=True, text=True, timeout=20 * timeout)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise AssertionError(f"nbconvert {name} failed after {took:.0f} s:\n{proc.stderr[-3000:]}")
    return nbformat.read(out_dir / f"{name}.ipynb", as_version=4), took


def widget_views(nb: nbformat.NotebookNode) -> int:
    """How many outputs of ``nb`` show a live widget (an explorer with widgets on)."""
    return sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
