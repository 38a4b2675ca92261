"""Render the notebooks: execute each ``notebooks/NN_*.py`` on its quick preset through a Jupyter
kernel (nbclient) and write it, outputs and images included, to ``docs/notebooks/NN_*.ipynb``,
which a code host displays without running anything. ``make render`` runs this script.

    python docs/notebooks/render.py            # every notebook
    python docs/notebooks/render.py 01 04      # some of them (by number or name)
    python docs/notebooks/render.py --figures DIR

The cells are read from the py:percent source (the same cells as its paired ``.ipynb``; the
``tests/test_render.py`` check compares them), with one markdown note on top. The kernel runs in
``notebooks/`` as in JupyterLab: no ``$MPLBACKEND``, no ``$TAILTHEORY_PRESET`` (each notebook's
parameters cell says ``quick``), one thread per library. Widget progress bars are kept with their
final state (the render stores the widgets' state; a host that cannot draw widgets shows the
bar's text). Figures are saved where ``--figures`` says, by default ``figures/`` as ``make figures``
does (the same notebooks on the same preset give the same bytes on one CPU kind), so each
caption's "Saved as figures/NAME.png" names a committed file. A render is written only when its notebook ran without
an error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NB_DIR = ROOT / "notebooks"
OUT_DIR = ROOT / "docs" / "notebooks"
CELL_TIMEOUT_S = 3600  # a quick preset's cells take seconds to minutes (full is not rendered)


def sources(selected: list[str]) -> list[Path]:
    """The notebooks' py:percent sources, all or those whose name starts with a selector."""
    every = sorted(NB_DIR.glob("[0-9]*.py"))
    if not selected:
        return every
    chosen = [p for p in every if any(p.stem.startswith(Path(s).stem) for s in selected)]
    missing = [s for s in selected if not any(p.stem.startswith(Path(s).stem) for p in every)]
    if missing:
        raise SystemExit(f"no notebook matches {missing}; notebooks: {[p.stem for p in every]}")
    return chosen


def provenance_line() -> str:
    """What a render was made from: tailtheory's version, the commit and its date, and whether
    the working tree had uncommitted changes (``unknown`` outside a git checkout)."""
    import subprocess

    from tailtheory import __version__

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("log", "-1", "--format=%h (%cs)") or "unknown"
    dirty = ", with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"tailtheory {__version__}, commit {commit}{dirty}"


def kernel_env(figures: Path) -> dict[str, str]:
    env = dict(os.environ, TAILTHEORY_FIGURES=str(figures), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for name in ("TAILTHEORY_PRESET", "MPLBACKEND"):  # as in JupyterLab
        env.pop(name, None)
    return env


def render(src: Path, figures: Path, made_from: str) -> Path:
    """Execute ``src`` and write its render, its note naming ``made_from``
    (:func:`provenance_line`); returns the render's path."""
    nb = jupytext.read(src)
    nb.metadata.pop("jupytext", None)  # a render is not paired: Lab must not write a .py beside it
    note = nbformat.v4.new_markdown_cell(
        f"*A render of [`notebooks/{src.name}`](../../notebooks/{src.name}) (paired with "
        f"`{src.stem}.ipynb`), executed on its `quick` preset by `make render` at "
        f"{made_from}. Edit the source, not this file; `tests/test_render.py` fails "
        "when the two differ.*")
    nb.cells.insert(0, note)
    for i, cell in enumerate(nb.cells):  # stable ids: a re-render changes outputs only
        cell.id = f"cell-{i:02d}"
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(NB_DIR)}}).execute(env=kernel_env(figures))
    nbformat.validate(nb)
    out = OUT_DIR / f"{src.stem}.ipynb"
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help="numbers or names (default: all)")
    ap.add_argument("--figures", type=Path, default=ROOT / "figures",
                    help="where the notebooks save their figures (default: figures/)")
    args = ap.parse_args(argv)
    figures = args.figures.resolve()
    figures.mkdir(parents=True, exist_ok=True)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    made_from = provenance_line()  # before the renders refresh figures/ (the tree as it was)
    for src in sources(args.notebooks):
        t0 = time.monotonic()
        print(f"== {src.relative_to(ROOT)}", flush=True)
        out = render(src, figures, made_from)
        print(f"   -> {out.relative_to(ROOT)} ({time.monotonic() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
