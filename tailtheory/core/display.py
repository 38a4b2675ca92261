"""Notebook output: inside a Jupyter kernel, figures inline and verdicts as a table; elsewhere
(a notebook run as a script, ``make repro``, the tests) files and plain text, as before.

- :func:`setup_notebook`: the notebooks' set-up: the ``Agg`` backend outside a kernel (the
  kernel's inline backend is left alone), transformers' weight-loading bars silenced, and the
  commands' thread rule for small models (:data:`NOTEBOOK_THREADS`).
- :func:`show_figure`: save a figure and its data (:func:`~tailtheory.core.io.save_figure`), show
  it inline with a caption in a kernel, close it.
- :func:`provenance`: the caption's first words: stored evidence, evidence measured by this run,
  or a quick pipeline check.
- :func:`verdict_report`: the notebooks' closing cell: the registered checks of their claims,
  each statement next to its measurement, a verdict other than the ledger's an error.

Whether the code runs in a Jupyter kernel (not a terminal IPython) is
:func:`tailtheory.core.io.in_kernel`.
"""

from __future__ import annotations

import html
import os
import sys
from pathlib import Path

import torch

from tailtheory.core.io import in_kernel
from tailtheory.core.io import save_figure
from tailtheory.core.models import TORCH_DEFAULT
from tailtheory.core.report import VerdictReport


def quiet_transformers() -> None:
    """Silence transformers' (and the Hub's) progress bars, "Loading weights" among them, in this
    process and in the training processes it starts. The toolkit's own bars (``tqdm.auto``) stay."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when transformers is imported
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


NOTEBOOK_THREADS = 1
"""torch intra-op threads of a notebook's process, set once by :func:`setup_notebook`: the
commands' rule for small models on the CPU (``tailtheory.engine.threads``), since every model the
notebooks build is a small one. Torch's default (one thread per core) loses badly on shared
cores: notebook 01 beside two busy processes on a 2-core CPU did not finish in 390 s with it.
Code that runs a large model picks its own count (``engine.threads.model_threads``, from
torch's default as it was before this set-up)."""


def setup_notebook() -> bool:
    """The notebooks' set-up cell. Outside a kernel: the ``Agg`` backend, no window (as
    ``python notebooks/NN.py`` and ``make repro`` always ran). Inside one: the kernel's backend is
    left as it is and :func:`show_figure` shows each figure inline. Either way torch gets
    :data:`NOTEBOOK_THREADS` threads. Returns whether it runs in a kernel
    (:func:`~tailtheory.core.io.in_kernel`)."""
    torch.set_num_threads(min(NOTEBOOK_THREADS, TORCH_DEFAULT))
    kernel = in_kernel()
    if not kernel:
        import matplotlib

        matplotlib.use("Agg")
    quiet_transformers()
    return kernel


def provenance(kind: str, preset: str, source: str = "results/") -> str:
    """A caption's first sentence, saying what a figure shows.

    ``kind`` is ``"measured"`` (computed by this run: the theory notebooks), ``"runs"`` (this
    preset's training runs or probes: a pipeline check under ``quick``, evidence under ``full``)
    or ``"stored"`` (a stored measurement, ``source``: read back under ``quick``, measured again
    and stored under ``full``).
    """
    if kind == "measured":
        return (f"Evidence: measured by this run ({preset} preset"
                + ("; smaller samples than full)." if preset == "quick" else ")."))
    if kind == "runs":
        if preset == "quick":
            return ("Quick pipeline check: the quick preset's 120-step warm start and a few steps; "
                    "it exercises the code and is not evidence.")
        return "Measured by this run on the full preset (cached runs reused)."
    if kind == "stored":
        if preset == "quick":
            return f"Stored evidence: read from {source} (this run did not re-measure it)."
        return f"Evidence: measured again by this run (cached runs reused) and stored in {source}."
    raise ValueError(f"kind must be 'measured', 'runs' or 'stored', got {kind!r}")


_NUMBERS: dict[str, int] = {}
"""Figure name -> its number in this kernel: the order figures were first shown (a cell run
again keeps its figure's number)."""


def figure_number(name: str) -> int:
    """The number of figure ``name`` in this kernel (:data:`_NUMBERS`), assigned on first use."""
    return _NUMBERS.setdefault(name, len(_NUMBERS) + 1)


def _caption_html(caption: str, png: Path, number: int) -> str:
    from tailtheory.core.io import REPO_ROOT

    shown = png.relative_to(REPO_ROOT) if png.is_relative_to(REPO_ROOT) else png
    head, sep, rest = caption.partition(":")
    text = (f"<b>{html.escape(head)}</b>:{html.escape(rest)}" if sep and len(head) < 40
            else html.escape(caption))
    return (f'<div style="font-size:0.9em;color:#444;margin:0 0 1em 0"><b>Figure {number}.</b> '
            f'{text} '
            f'Saved as <code>{html.escape(str(shown))}</code> with its data '
            f'(<code>{html.escape(png.with_suffix(".csv").name)}</code>).</div>')


def figure_alt(fig, name: str) -> str:
    """A figure's alternative text: its name, then its title and each panel's title and axis
    labels (what a reader who cannot see it needs to know it is there and what it plots)."""
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    def axis(ax) -> str:
        y, x = ax.get_ylabel(), ax.get_xlabel()
        return f"{y} against {x}" if y and x else x or y

    panels = [" / ".join(x for x in (ax.get_title(), axis(ax)) if x)
              for ax in fig.axes if ax.get_visible()]
    return "; ".join(x for x in [f"figure {name}", title, *panels] if x)


def show_figure(fig, name: str, data=None, caption: str = "",
                directory: str | os.PathLike | None = None) -> None:
    """Save ``fig`` as ``NAME.png`` and ``data`` as ``NAME.csv`` (as
    :func:`~tailtheory.core.io.save_figure`), then, inside a kernel, show the saved image with
    ``caption`` under it. The figure is closed either way (the kernel's inline backend would
    otherwise draw it a second time). Returns nothing, so a cell ending in it shows no path."""
    import matplotlib.pyplot as plt


    alt = figure_alt(fig, name)
    png = save_figure(fig, name, data=data, directory=directory)
    plt.close(fig)
    if in_kernel():
        from IPython.display import HTML, Image, display

        display(Image(data=png.read_bytes(), format="png", alt=alt))
        if caption:
            display(HTML(_caption_html(caption, png, figure_number(name))))


def verdict_report(ids: list[str], profile: str = "quick"):
    """Run the registered checks of ``ids``, show each statement next to its measurement, and
    raise ``AssertionError`` when a verdict is not the one the ledger records (the notebooks'
    closing cell: one verdict path for every claim).

    Returns a :class:`~tailtheory.core.report.VerdictReport` (a list of
    :class:`~tailtheory.core.registry.ClaimResult`, in the order of ``ids``). Inside a Jupyter kernel it is displayed as an
    HTML table (coloured verdicts, key numbers, the command that regenerates each, all numbers
    folded away); elsewhere its text is printed."""
    from tailtheory.core.registry import run_claim, select

    chosen = {c.id: c for c in select(list(ids))}
    results = VerdictReport([run_claim(chosen[i], profile) for i in dict.fromkeys(ids)], profile)
    if in_kernel():
        from IPython.display import display

        display(results)
    else:
        print(results)
    wrong = [(r.claim.id, r.verdict) for r in results if r.verdict != r.claim.expected.value]
    assert not wrong, f"verdicts differ from the ledger: {wrong}"
    return results


__all__ = ["quiet_transformers", "setup_notebook", "provenance", "show_figure", "verdict_report"]
