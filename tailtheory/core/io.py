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

WORKERS_ENV = "TAILTHEORY_WORKERS"
"""Environment variable that overrides a training notebook's ``WORKERS`` parameter (the test
suite sets it to 1 on its pytest workers, which already fill the cores)."""

REPO_ROOT = Path(__file__).resolve().parents[2]
_UMASK = os.umask(0)
os.umask(_UMASK)

CACHE_ENV = "TAILTHEORY_CACHE"
"""Environment variable that moves the caches (tests point it at a temporary folder)."""


def cache_dir(name: str) -> Path:
    """``$TAILTHEORY_CACHE/<name>``, else ``cache/<name>`` of the checkout (or of the working
    directory, for an installed package)."""
    default = REPO_ROOT / "cache" if (REPO_ROOT / "pyproject.toml").exists() else Path("cache")
    return Path(os.environ.get(CACHE_ENV, default)) / name


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


REPRO = Path("build") / "repro"
"""Where ``tailtheory verify`` and ``make repro`` write, under the checkout (ignored by git)."""


def repro_dir() -> Path:
    """Where ``tailtheory verify`` writes ``claims.json`` by default: ``$TAILTHEORY_FIGURES``
    when set (``make repro`` sets it to ``build/repro/``, ``make figures`` to the committed
    ``figures/``), else ``build/repro/`` of the checkout (or of the working directory when the
    package is installed outside one). The committed reference changes only when asked."""
    if FIGURES_ENV in os.environ:
        d = Path(os.environ[FIGURES_ENV])
    else:
        d = (REPO_ROOT if (REPO_ROOT / "pyproject.toml").exists() else Path.cwd()) / REPRO
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


def workers(default: int) -> int:
    """A training notebook's count of training processes: ``$TAILTHEORY_WORKERS`` if set, else
    ``default`` (the parameters cell's ``WORKERS``). 1 trains in the notebook's own process, one
    run after another; a run is deterministic either way, so only the time changes. When the
    environment variable decides, a line says so; a value that is not an integer >= 1 is a
    ``ValueError`` naming where it came from."""
    env = os.environ.get(WORKERS_ENV)
    raw = default if env is None else env.strip()
    ok = raw.isdigit() if env is not None else (isinstance(raw, int)
                                                  and not isinstance(raw, bool))
    if not ok or int(raw) < 1:
        source = f"${WORKERS_ENV}" if env is not None else "the parameters cell"
        raise ValueError(f"WORKERS must be an integer >= 1, got {raw!r} (from {source})")
    n = int(raw)
    if env is not None:
        print(f"WORKERS = {n}, from ${WORKERS_ENV}"
              + (f" (overrides {default!r} of the parameters cell)" if n != default else ""))
    return n


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
    """Write ``obj`` as JSON indented by one space a level (readable, and a fifth smaller than two
    spaces on the stored measurements) to ``path`` atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=False, default=float) + "\n")


def save_figure(fig, name: str, data=None, directory: str | os.PathLike | None = None,
                software: str | None = None) -> Path:
    """Save ``fig`` as ``NAME.png`` and ``data`` (a DataFrame) as ``NAME.csv``, atomically.

    Returns the PNG path. ``directory`` defaults to :func:`figures_dir`. ``software``: the PNG's
    ``Software`` text (what :func:`png_software` reads back; a command's ``--out`` uses it to
    recognise its own files); default none, so reruns give the same bytes on any version.
    """
    import io as _io

    d = Path(directory) if directory is not None else figures_dir()
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight",
                metadata={"Software": software})  # no version stamp: reruns give the same bytes
    png = atomic_write_bytes(d / f"{name}.png", buf.getvalue())
    if data is not None:
        # 8 significant digits: enough to re-plot, a third of the bytes of full repr
        atomic_write_text(d / f"{name}.csv", data.to_csv(index=False, float_format="%.8g"))
    return png


# ---- --out: never replace what the toolkit did not write --------------------------------------

def png_software(path: str | os.PathLike) -> str | None:
    """The ``Software`` text chunk of a PNG file (None for another file or a PNG without one);
    reads the chunks before the image data only."""
    import struct
    import zlib

    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return None
        while True:
            head = f.read(8)
            if len(head) < 8:
                return None
            size, kind = struct.unpack(">I4s", head)
            if kind in (b"IDAT", b"IEND") or size > 1 << 20:
                return None
            body = f.read(size + 4)[:size]                         # the chunk and its CRC
            if kind in (b"tEXt", b"zTXt") and body.startswith(b"Software\0"):
                text = body[len(b"Software\0"):]
                if kind == b"zTXt":                               # a compression byte, then zlib
                    text = zlib.decompress(text[1:])
                return text.decode("latin-1")


def check_out_file(path: str | os.PathLike, ours, what: str = "--out") -> Path:
    """``path`` as a ``Path`` if a command may write its output file there: missing, or a file
    that ``ours(path)`` recognises by its content as this command's own earlier output. A
    folder, or any other file (a notes file, a model's ``config.json``), is a ``ValueError``
    naming it, and nothing is written: the toolkit never replaces a file it did not write."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; name the file to write (a new one, or one "
                         f"this command wrote before)")
    if path.exists() or path.is_symlink():
        try:
            mine = path.is_file() and bool(ours(path))
        except (OSError, ValueError, UnicodeDecodeError):
            mine = False
        if not mine:
            raise ValueError(f"{what} {path} exists and was not written by this tailtheory "
                             f"command; nothing was written: move it away or choose another "
                             f"--out")
    return path
