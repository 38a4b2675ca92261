"""Per-token dumps of an RL run, read in batches and checked, for ``tailtheory diagnose``.

Source: TIM (arXiv 2605.14220) for the quantity, ``log_rho = log pi_train - log pi_roll`` of the
sampled token; DVP (arXiv 2512.23087) and TRM (arXiv 2512.23075) for what is computed from it
(:mod:`tailtheory.diagnose`). Recipes for TRL and verl runs: ``docs/diagnose.md``.

The formats are the readers of :mod:`tailtheory.diagnose.formats`, one module each, listed once
in its table: the generic format (:mod:`~tailtheory.diagnose.formats.generic`, its columns and
shapes), this engine's ``--dump-tokens`` (:mod:`~tailtheory.diagnose.formats.engine`) and the
frameworks' own dumps. This module only iterates that table: a folder is expanded into the
files of the first reader that finds any (:func:`expand_dumps`), a file's format is the first
reader that claims it (:func:`detect`) unless ``--format`` names one, and the reader checks the
file (:func:`open_dump`) and gives its token rows (:func:`iter_batches`).

Errors (``ValueError`` / ``FileNotFoundError``, the file named): a missing path, a folder with no
dumps, an unknown suffix, a file that is not parquet / JSON lines, an empty file, missing columns
(named), values of the wrong type, per-token lists of different lengths, a repeated position.

Shapes: a :class:`Batch` holds ``n`` token rows, ``(n,)`` arrays and top-k ``(n, k)``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterator

from tailtheory.diagnose.formats import get_reader, reader_names, readers, search_order
from tailtheory.diagnose.formats.base import Batch, Dump, column_names
from tailtheory.diagnose.formats.registry import AUTO

BATCH_ROWS = 65536
"""Rows read at a time (parquet ``iter_batches``, JSON lines per chunk)."""
TOPK_VALUES = 1 << 22
"""With top-k lists, a batch holds at most about this many list entries (``batch_rows`` shrinks
to ``TOPK_VALUES // k`` with ``k`` the first row's list length): full distributions of a large
vocabulary stay within memory."""


def format_names() -> tuple[str, ...]:
    """Values of ``--format``: ``auto`` (detect each file's), then every reader's name in
    table order."""
    return (AUTO,) + reader_names()


def format_lines() -> list[str]:
    """One line per format of the table: its name, what writes it, where its files sit."""
    width = max(map(len, reader_names()))
    return [f"{r.name:<{width}}  {r.about}; files: {', '.join(r.patterns)}" for r in readers()]


def expand_dumps(paths) -> list[Path]:
    """The dump files named by ``paths``: a file stays itself; a folder gives the files of the
    first reader (table order, the generic fallback last) that finds any there
    (:attr:`~tailtheory.diagnose.formats.registry.Reader.find`: a run directory's
    ``tokens/step_*.parquet``, NeMo-RL's ``train_data_step*.jsonl``, prime-rl's
    ``[token_exports/]step_*/rank_*.jsonl``, slime's ``[train_data/]*.pt``, else its
    ``*.parquet`` and ``*.jsonl`` files). A missing path or a folder without dumps raises
    ``FileNotFoundError``; the list is sorted per folder (steps in numeric order) and free of
    repeats."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_dir():
            order = search_order()
            found = next((files for files in (r.find(p) for r in order) if files), [])
            found = [f for f in found if f.is_file()]
            if not found:
                where = [r.patterns[0] for r in order[:-1]] + [" or ".join(order[-1].patterns)]
                raise FileNotFoundError(f"{p}: no dumps in this folder (expected "
                                        f"{', '.join(where)})")
            out.extend(found)
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def detect(path: Path) -> str:
    """The format of one file: the first reader of the table that reads its suffix and whose
    ``sniff`` claims it (from its name and first record), else the fallback (generic)."""
    suffix = path.suffix.lower()
    suffixes = list(dict.fromkeys(s for r in readers() for s in r.suffixes))
    if suffix not in suffixes:
        raise ValueError(f"{path}: unknown dump format {path.suffix!r} (expected "
                         f"{' or '.join(suffixes)})")
    for r in search_order():
        if suffix in r.suffixes and (r.fallback or r.sniff(path)):
            return r.name
    raise ValueError(f"{path}: no format reads this file (formats: "
                     f"{', '.join(reader_names())})")


def open_dumps(files, fmt: str = AUTO) -> list[Dump]:
    """:func:`open_dump` of each file, with ``fmt`` (one of :func:`format_names`); the files
    share one record of the samples read, so a sample that several ranks wrote counts once."""
    seen: set = set()
    return [open_dump(Path(f), fmt, seen) for f in files]


def open_dump(path: Path, fmt: str = AUTO, seen: set | None = None) -> Dump:
    """Check one file before reading it: its format (``fmt``, or detected when ``auto``), then
    its reader's checks (rows, the columns or keys of its format). Raises ``ValueError`` naming
    the file."""
    if fmt not in format_names():
        raise ValueError(f"unknown --format {fmt!r} (expected one of "
                         f"{', '.join(format_names())})")
    kind = detect(path)
    if fmt not in (AUTO, kind):
        _refuse(path, fmt, kind)
    return replace(get_reader(kind).check(path), seen=seen)


def _refuse(path: Path, fmt: str, kind: str) -> None:
    """Raise the error of a file of format ``kind`` read as ``fmt``. A file detected as a
    tabular format may be a file of ``fmt`` that lacks its keys: ``fmt``'s checks name what it
    lacks (two tabular formats: the columns ``fmt`` needs)."""
    want, found = get_reader(fmt), get_reader(kind)
    if found.tabular and want.tabular:
        found.check(path)
        have = column_names(path)
        raise ValueError(f"{path}: --format {fmt}, but the file lacks the columns "
                         f"{', '.join(c for c in want.required if c not in have)}")
    if found.tabular:
        want.check(path)
    raise ValueError(f"{path}: --format {fmt}, but this file is a {kind} dump; pass "
                     f"--format {kind} or auto")


def iter_batches(dump: Dump, file: int, batch_rows: int = BATCH_ROWS) -> Iterator[Batch]:
    """The file's token rows in the generic names, ``batch_rows`` (or one sequence row's tokens
    more) at a time, from its reader; never the whole file at once. With top-k lists a batch
    holds at most about :data:`TOPK_VALUES` list entries."""
    if dump.topk_k:
        batch_rows = max(1, min(batch_rows, TOPK_VALUES // dump.topk_k))
    yield from get_reader(dump.kind).rows(dump, file, batch_rows)


__all__ = ["Dump", "Batch", "BATCH_ROWS", "TOPK_VALUES", "format_names", "format_lines",
           "expand_dumps", "detect", "open_dumps", "open_dump", "iter_batches"]
