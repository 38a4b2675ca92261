"""What every reader of :mod:`tailtheory.diagnose.formats` shares: the opened file (:class:`Dump`),
a batch of token rows in the generic names (:class:`Batch`, built by :func:`to_batch`), and the
reading of tables of named columns (parquet / JSON lines) that the tabular formats use.

Source: TIM (arXiv 2605.14220) for ``log_rho = log pi_train - log pi_roll`` of the sampled
token; the generic format is described in :mod:`tailtheory.diagnose.formats.generic`.

Shapes: a :class:`Batch` holds ``n`` token rows, ``(n,)`` arrays and top-k ``(n, k)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tailtheory.diagnose import columns as cols
from tailtheory.diagnose.formats.registry import reader_names, readers


@dataclass(frozen=True)
class Dump:
    """One input file: its path, format (``parquet`` / ``jsonl`` / ``pt``), kind (the name of
    its reader), token rows when the file's metadata knows them, its top-k columns, whether it
    holds one row per response (``seq_rows``), how it stores its log-probs (``precision``, e.g.
    ``float32 as stored``: what "bitwise equal" means for it), the generic columns of
    :data:`SOMETIMES` it lacks (``lacks``), and the samples already read from the other files
    of a slime run (``seen``)."""

    path: Path
    fmt: str
    kind: str
    rows: int | None
    topk: tuple[str, ...]
    seq_rows: bool = False
    topk_k: int = 0
    precision: str = ""
    lacks: tuple[str, ...] = ()
    seen: set | None = field(default=None, compare=False, repr=False)


SOMETIMES = ("step", "logged_ratio")
"""Generic columns a section reads when a file gives them, and that some files cannot give:
``step`` (without it every row is step 0, so a run's steps cannot be told apart) and
``logged_ratio`` (the framework's own logged importance ratio). :attr:`Dump.lacks` names those
a file lacks."""
JSON_PRECISION = "JSON-rounded decimals"
"""How a JSON lines file stores its log-probs: decimals as its writer printed them, read back as
float64 (Python's writers print the shortest decimal that reads back as the same float)."""
ARROW_FLOATS = {"halffloat": "float16", "float": "float32", "double": "float64"}
"""Arrow's names of the float types, in numpy's."""


def arrow_precision(schema, columns) -> str:
    """How a parquet file stores ``columns`` (lists: their values): ``float32 as stored``, or
    each column's type when they differ (``logp_train float64, logp_rollout float32 as
    stored``)."""
    kinds = {}
    for c in columns:
        t = schema.field(c).type
        while pa.types.is_list(t) or pa.types.is_large_list(t):
            t = t.value_type
        kinds[c] = ARROW_FLOATS.get(str(t), str(t))
    if len(set(kinds.values())) == 1:
        return f"{next(iter(kinds.values()))} as stored"
    return ", ".join(f"{c} {k}" for c, k in kinds.items()) + " as stored"


def stored_precision(path: Path, fmt: str, columns) -> str:
    """How a table stores its log-prob ``columns``: :func:`arrow_precision` of a parquet file,
    :data:`JSON_PRECISION` of a JSON lines file."""
    return arrow_precision(parquet(path).schema_arrow, columns) if fmt == "parquet" \
        else JSON_PRECISION


@dataclass
class Batch:
    """Token rows of one file in the generic names. ``ok`` marks rows with finite log-probs;
    ``bad`` counts the others per column (as the file names it). ``topk_roll`` / ``topk_train``
    are ``(n, k)`` padded with ``-inf`` (absent: None); ``logged_ratio``: the framework's own
    logged importance ratio of each row, NaN where not logged (absent: None); it never excludes a
    row."""

    file: int
    step: np.ndarray
    sample_id: np.ndarray
    position: np.ndarray
    token_id: np.ndarray
    logp_train: np.ndarray
    log_rho: np.ndarray
    advantage: np.ndarray | None
    reward: np.ndarray | None
    topk_roll: np.ndarray | None
    topk_train: np.ndarray | None
    ok: np.ndarray
    bad: dict[str, int]
    logged_ratio: np.ndarray | None = None


def to_batch(tbl, dump: Dump, file: int, train: np.ndarray, log_rho: np.ndarray,
             checked: dict[str, np.ndarray], names: dict[str, str] | None = None) -> Batch:
    """A :class:`Batch` of the arrow table ``tbl`` whose log-probs the reader has read:
    ``train`` (``log pi_train``), ``log_rho`` and ``checked`` (the file's own log-prob columns
    by its names, whose non-finite values exclude a row). ``names``: generic name -> the
    file's, for the columns it names otherwise."""
    path, n = dump.path, tbl.num_rows
    names = names or {}
    name = lambda g: names.get(g, g)  # noqa: E731  (the file's name of a generic column)
    has = lambda g: name(g) in tbl.column_names  # noqa: E731
    topk = {c: cols.padded(tbl, c, path) for c in dump.topk if c in tbl.column_names}
    cols.check_topk(topk, path)
    topk = {c: v for c, (v, _) in topk.items()}
    finite = {c: np.isfinite(v) for c, v in checked.items()}
    finite.update({c: ~np.isnan(v).any(1) & ~np.isposinf(v).any(1) for c, v in topk.items()})
    ok = np.logical_and.reduce(list(finite.values())) & np.isfinite(log_rho)
    step = cols.ints(tbl, name("step"), path) if has("step") else np.zeros(n, np.int64)
    return Batch(file=file, step=step, sample_id=cols.ids(tbl, name("sample_id"), path),
                 position=cols.ints(tbl, name("position"), path),
                 token_id=cols.ints(tbl, name("token_id"), path), logp_train=train, log_rho=log_rho,
                 advantage=cols.floats(tbl, name("advantage"), path) if has("advantage") else None,
                 reward=cols.floats(tbl, "reward", path) if has("reward") else None,
                 topk_roll=topk.get("topk_logp_rollout"), topk_train=topk.get("topk_logp_train"),
                 ok=ok, bad={c: int((~f).sum()) for c, f in finite.items() if (~f).any()},
                 logged_ratio=cols.floats(tbl, name("logged_ratio"), path)
                 if has("logged_ratio") else None)


def batch_of(tbl, dump: Dump, file: int) -> Batch:
    """:func:`to_batch` of a table in the generic names (sequence rows exploded to token rows
    first): ``log_rho = logp_train - logp_rollout``."""
    if pa.types.is_list(tbl.schema.field("logp_train").type):
        tbl = cols.explode(tbl, dump.path)
    roll = cols.floats(tbl, "logp_rollout", dump.path)
    train = cols.floats(tbl, "logp_train", dump.path)
    return to_batch(tbl, dump, file, train, train - roll,
                    {"logp_train": train, "logp_rollout": roll})


# --- folders ------------------------------------------------------------------------------------

def natural(files) -> list[Path]:
    """Sorted with the numbers in the path compared as numbers (step 2 before step 10)."""
    key = lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(f))]  # noqa: E731
    return sorted(files, key=key)


def first_found(folder: Path, patterns, order: Callable = natural) -> list[Path]:
    """The files of the first glob of ``patterns`` that matches any under ``folder``, in
    ``order`` (:func:`natural`, or ``sorted``)."""
    return next((order(found) for found in (list(folder.glob(p)) for p in patterns) if found), [])


# --- tables of named columns ----------------------------------------------------------------

def parquet(path: Path):
    """``path`` opened as a parquet file; ``ValueError`` when it is not one."""
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # ArrowInvalid, OSError: a foreign, torn or unreadable file
        raise ValueError(f"{path}: not a readable parquet file ({exc})") from None


def column_names(path: Path) -> set:
    """The columns of a parquet file, or the keys of a JSON lines file's first record."""
    if path.suffix.lower() == ".parquet":
        return set(parquet(path).schema_arrow.names)
    first = next(cols.jsonl_records(path, 1), None)
    return set(first[0]) if first else set()


def table_info(path: Path) -> tuple[str, set, int | None, bool]:
    """``(fmt, names, rows, seq_rows)`` of a table: ``parquet`` or ``jsonl``, its columns, its
    token rows when known (``None``: known only once read), and whether ``logp_train`` holds
    lists (one row per response). ``ValueError`` when the table has no rows."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt == "parquet":
        pf = parquet(path)
        names, rows = set(pf.schema_arrow.names), pf.metadata.num_rows
        seq_rows = "logp_train" in names and pa.types.is_list(
            pf.schema_arrow.field("logp_train").type)
        if seq_rows:
            rows = rows and None  # sequence rows: the token count is known only once read
    else:
        first = next(cols.jsonl_records(path, 1), None)
        names, rows = (set(first[0]) if first else set()), (None if first else 0)
        seq_rows = bool(first) and isinstance(first[0].get("logp_train"), list)
    if rows == 0:
        raise ValueError(f"{path}: the dump has no rows")
    return fmt, names, rows, seq_rows


def first_len(path: Path, fmt: str, c: str) -> int:
    """Length of the first row's list in column ``c`` (a per-token list; in sequence rows, the
    first token's), or 0 when it is not a list."""
    if fmt == "parquet":
        first = next(parquet(path).iter_batches(batch_size=1, columns=[c])).column(0)[0].as_py()
    else:
        first = next(cols.jsonl_records(path, 1))[0].get(c)
    while isinstance(first, list) and first and isinstance(first[0], list):
        first = first[0]
    return len(first) if isinstance(first, list) else 0


def missing_columns(path: Path, missing) -> ValueError:
    """The error of a table that lacks ``missing``: what each tabular format needs, and the
    formats read."""
    needs = "; ".join(f"{'an' if r.name[0] in 'aeiou' else 'a'} {r.name} dump "
                      f"{'needs ' if i == 0 else ''}{', '.join(r.required)}"
                      for i, r in enumerate(r for r in readers() if r.tabular))
    return ValueError(f"{path}: missing column(s) {', '.join(missing)} ({needs}; the formats "
                      f"read are {', '.join(reader_names())}, see docs/diagnose.md)")


def table_batches(dump: Dump, file: int, batch_rows: int, need: tuple[str, ...],
                  convert: Callable) -> Iterator[Batch]:
    """A table's batches of ``batch_rows`` rows (or one sequence row's tokens more), each
    made a :class:`Batch` by ``convert(tbl, dump, file)``; a JSON lines record lacking a column
    of ``need`` is refused. Never the whole file at once."""
    if dump.fmt == "parquet":
        pf = parquet(dump.path)
        try:
            for rb in pf.iter_batches(batch_size=batch_rows):
                yield convert(pa.Table.from_batches([rb]), dump, file)
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"{dump.path}: cannot read a row group ({exc})") from None
    else:
        for tbl in _jsonl_tables(dump.path, batch_rows, need):
            yield convert(tbl, dump, file)


def _jsonl_tables(path: Path, chunk: int, need: tuple[str, ...]):
    line = 0
    for recs in cols.jsonl_records(path, chunk):
        for j, r in enumerate(recs):
            missing = [c for c in need if c not in r]
            if missing:
                raise ValueError(f"{path}: record {line + j + 1} lacks column(s) "
                                 f"{', '.join(missing)}")
        keys = list(dict.fromkeys(k for r in recs for k in r))
        try:
            yield pa.table({k: [r.get(k) for r in recs] for k in keys})
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"{path}: records {line + 1}-{line + len(recs)} mix value types "
                             f"in a column ({exc})") from None
        line += len(recs)
