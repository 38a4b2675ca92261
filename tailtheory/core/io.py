"""Atomic writes and figure output.

Nothing a user produced is lost to a crash: every file is written to a temporary file in the
same directory and moved into place with ``os.replace``. Figures are saved with the data behind
them (CSV) so a reader can re-plot without rerunning; where they go depends on whether the code
runs in a Jupyter kernel (:func:`in_kernel`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

FIGURES_ENV = "TAILTHEORY_FIGURES"
"""Environment variable that redirects figure output (tests point it at a temporary folder)."""

PRESET_ENV = "TAILTHEORY_PRESET"
"""Environment variable that overrides a notebook's ``PRESET`` parameter."""

REPO_ROOT = Path(__file__).resolve().parents[2]
_UMASK = os.umask(0)
os.umask(_UMASK)


SCRATCH_FIGURES = "scratch"
"""Sub-folder of the checkout's ``figures/`` (ignored by git) that a Jupyter kernel writes to."""


def in_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, nbclient, papermill, nbmake); False in a plain
    interpreter or a terminal IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:  # never imported: no shell can be running
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def figures_dir() -> Path:
    """Where figures go: ``$TAILTHEORY_FIGURES``, else ``figures/`` of the checkout (or of the
    working directory when the package is installed outside one). Inside a Jupyter kernel the
    checkout's default is ``figures/scratch/``, which git ignores: running or saving a notebook in
    JupyterLab leaves the tracked figures alone (``make repro`` and ``make render`` set
    ``$TAILTHEORY_FIGURES``)."""
    if (REPO_ROOT / "pyproject.toml").exists():
        default = REPO_ROOT / "figures"
        if FIGURES_ENV not in os.environ and in_kernel():
            default = default / SCRATCH_FIGURES
    else:
        default = Path("figures")
    d = Path(os.environ.get(FIGURES_ENV, default))
    d.mkdir(parents=True, exist_ok=True)
    return d


def preset(default: str, allowed: tuple[str, ...] = ("quick", "full")) -> str:
    """A notebook's preset: ``$TAILTHEORY_PRESET`` if set, else ``default`` (the value of the
    notebook's parameters cell). When the environment variable decides, a line says so, so an
    edit of the parameters cell is never silently overridden."""
    env = os.environ.get(PRESET_ENV)
    name = default if env is None else env
    if name not in allowed:
        source = f"${PRESET_ENV}" if env is not None else "the parameters cell"
        raise ValueError(f"PRESET must be one of {allowed}, got {name!r} (from {source})")
    if env is not None:
        print(f"PRESET = {name!r}, from ${PRESET_ENV}"
              + (f" (overrides {default!r} of the parameters cell)" if env != default else ""))
    return name


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)  # mkstemp makes 0600; use the usual mode
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


PARTIAL_GLOB = ".*.tmp"
"""Names of the temporary files of :func:`atomic_write_bytes` (``.NAME.XXXX.tmp``)."""


def remove_partial_writes(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that writes interrupted by a killed process left in
    ``directory`` (not recursive); returns their paths. Call it only while no other process can
    be writing there (a run holds its lock)."""
    d = Path(directory)
    stale = sorted(p for p in d.glob(PARTIAL_GLOB) if p.is_file()) if d.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=float) + "\n")


def save_figure(fig, name: str, data=None, directory: str | os.PathLike | None = None) -> Path:
    """Save ``fig`` as ``NAME.png`` and ``data`` (a DataFrame) as ``NAME.csv``, atomically.

    Returns the PNG path. ``directory`` defaults to :func:`figures_dir`.
    """
    import io as _io

    d = Path(directory) if directory is not None else figures_dir()
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight",
                metadata={"Software": None})  # no version stamp: reruns give the same bytes
    png = atomic_write_bytes(d / f"{name}.png", buf.getvalue())
    if data is not None:
        # 8 significant digits: enough to re-plot, a third of the bytes of full repr
        atomic_write_text(d / f"{name}.csv", data.to_csv(index=False, float_format="%.8g"))
    return png
