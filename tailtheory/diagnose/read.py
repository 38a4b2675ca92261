"""Per-token dumps of an RL run, read in batches and checked, for ``tailtheory diagnose``.

Source: TIM (arXiv 2605.14220) for the quantity, ``log_rho = log pi_train - log pi_roll`` of the
sampled token; DVP (arXiv 2512.23087) and TRM (arXiv 2512.23075) for what is computed from it
(:mod:`tailtheory.diagnose`). Recipes for TRL and verl runs: ``docs/diagnose.md``.

**Generic format** (``.parquet``, or ``.jsonl``: one JSON object per line), in one of two shapes:

- *token rows*, one row per response token:

  ==================  =====  =====================================================================
  ``sample_id``       int    the response; unique within a file and step (a string is allowed)
                      / str
  ``position``        int    the token's index in its response (>= 0, distinct within a response)
  ``token_id``        int    the sampled token
  ``logp_train``      float  ``log pi_train``: the trainer's log-prob of the sampled token
  ``logp_rollout``    float  ``log pi_roll``: the sampler's log-prob of the same token
  ``advantage``       float  optional: the token's advantage
  ``reward``          float  optional: the response's reward (repeated on its tokens)
  ``step``            int    optional (default 0): the training step
  ``topk_logp_rollout`` list optional: the sampler's log-probs of its k most likely tokens at
                             this position, normalised over the full vocabulary (k = V: the
                             full distribution); k may differ between rows
  ``topk_logp_train`` list   optional: the trainer's log-probs of the same k tokens, in the same
                             order (the same length); alone, the trainer's k most likely tokens
  ==================  =====  =====================================================================

- *sequence rows*, one row per response: ``sample_id``, ``step``, ``reward`` as scalars, and
  ``token_id``, ``logp_train``, ``logp_rollout`` (optional ``position``, default ``0..n-1``;
  ``advantage``, a list or one scalar for every token; ``topk_*`` as lists of lists) as lists of
  one length per row. The shape is read from ``logp_train``: a list means sequence rows.

A ``null`` log-prob is NaN (TRL writes vLLM's unscored tokens so). Rows whose log-probs (or
top-k entries) are NaN or +-inf are *excluded*, counted per column, never averaged in.

**Engine format**: ``tailtheory train --dump-tokens`` writes ``RUN/tokens/step_*.parquet``
(:func:`tailtheory.engine.trainer.dump_tokens`); :data:`ENGINE_TO_GENERIC` maps its columns onto
the generic names, the one place they meet. A run directory or its ``tokens`` folder may be
given instead of the files.

**Framework dumps** (:mod:`tailtheory.diagnose.frameworks` and :mod:`~tailtheory.diagnose.slime`,
with their sources): NeMo-RL's, prime-rl's and slime / Miles'; the format is detected per file
(:func:`detect`) unless named (``--format``).

Errors (``ValueError`` / ``FileNotFoundError``, the file named): a missing path, a folder with no
dumps, an unknown suffix, a file that is not parquet / JSON lines, an empty file, missing columns
(named), values of the wrong type, per-token lists of different lengths, a repeated position.

Shapes: a :class:`Batch` holds ``n`` token rows, ``(n,)`` arrays and top-k ``(n, k)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from tailtheory.diagnose import columns as cols
from tailtheory.diagnose.columns import TOPK

REQUIRED = ("sample_id", "position", "token_id", "logp_train", "logp_rollout")
"""Columns every generic dump has."""
OPTIONAL = ("advantage", "reward", "step")
"""Generic columns read when present."""
ENGINE_REQUIRED = ("step", "seq", "t", "token", "logp_roll", "log_rho")
"""Columns of the engine's dump this reader needs."""
ENGINE_TO_GENERIC = {"step": "step", "seq": "sample_id", "t": "position", "token": "token_id",
                     "logp_roll": "logp_rollout", "adv": "advantage"}
"""Engine column -> generic name; ``logp_train = logp_roll + log_rho`` (``log_rho = log pi_train
- log pi_roll``, ``tailtheory.engine.types.PolicyBatch.log_rho``, under either ``pi_old`` mode;
``logp_old`` is the rollout's under ``--pi-old bypass`` and is not read)."""
FORMATS = ("auto", "generic", "engine", "nemo-rl", "prime-rl", "slime")
"""Values of ``--format``; ``auto`` detects each file's."""
SUFFIXES = {".parquet": "parquet", ".jsonl": "jsonl", ".pt": "pt"}
"""File suffix -> format (``.pt``: slime / Miles only)."""
BATCH_ROWS = 65536
"""Rows read at a time (parquet ``iter_batches``, JSON lines per chunk)."""
TOPK_VALUES = 1 << 22
"""With top-k lists, a batch holds at most about this many list entries (``batch_rows`` shrinks
to ``TOPK_VALUES // k`` with ``k`` the first row's list length): full distributions of a large
vocabulary stay within memory."""


@dataclass(frozen=True)
class Dump:
    """One input file: its path, format (``parquet`` / ``jsonl`` / ``pt``), kind (``engine``,
    ``generic`` or a framework), token rows when the file's metadata knows them, its top-k
    columns, whether it holds one row per response (``seq_rows``), and the samples already read
    from the other files of a slime run (``seen``)."""

    path: Path
    fmt: str
    kind: str
    rows: int | None
    topk: tuple[str, ...]
    seq_rows: bool = False
    topk_k: int = 0
    seen: set | None = field(default=None, compare=False, repr=False)


@dataclass
class Batch:
    """Token rows of one file in the generic names. ``ok`` marks rows with finite log-probs;
    ``bad`` counts the others per column (as the file names it). ``topk_roll`` / ``topk_train``
    are ``(n, k)`` padded with ``-inf`` (absent: None)."""

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


def expand_dumps(paths) -> list[Path]:
    """The dump files named by ``paths``: a file stays itself; a run directory gives
    ``RUN/tokens/step_*.parquet``; any other folder, the first kind it holds of: its
    ``step_*.parquet`` files, NeMo-RL's ``train_data_step*.jsonl``, prime-rl's
    ``[token_exports/]step_*/rank_*.jsonl``, slime's ``[train_data/]*.pt``, else its
    ``*.parquet`` and ``*.jsonl`` files. A missing path or a folder without dumps raises
    ``FileNotFoundError``; the list is sorted per folder (steps in numeric order) and free of
    repeats."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_dir():
            d = p / "tokens" if (p / "tokens").is_dir() else p
            prime = d / "token_exports" if (d / "token_exports").is_dir() else d
            slime = d / "train_data" if (d / "train_data").is_dir() else d
            found = (sorted(d.glob("step_*.parquet")) or _natural(d.glob("train_data_step*.jsonl"))
                     or _natural(prime.glob("step_*/rank_*.jsonl"))
                     or _natural(d.glob("rank_*.jsonl")) or _natural(slime.glob("*.pt"))
                     or sorted(f for s in (".parquet", ".jsonl") for f in d.glob(f"*{s}")))
            found = [f for f in found if f.is_file()]
            if not found:
                raise FileNotFoundError(f"{p}: no dumps in this folder (expected "
                                        f"tokens/step_*.parquet, train_data_step*.jsonl, "
                                        f"token_exports/step_*/rank_*.jsonl, train_data/*.pt, "
                                        f"*.parquet or *.jsonl)")
            out.extend(found)
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def _natural(files) -> list[Path]:
    """Sorted with the numbers in the path compared as numbers (step 2 before step 10)."""
    key = lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(f))]  # noqa: E731
    return sorted(files, key=key)


def detect(path: Path) -> str:
    """The format of one file: a framework's (from its name and keys,
    :func:`tailtheory.diagnose.frameworks.sniff`), else ``engine`` or ``generic`` (from its
    columns, checked when it is opened)."""
    from tailtheory.diagnose import frameworks

    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(f"{path}: unknown dump format {path.suffix!r} (expected "
                         f"{' or '.join(SUFFIXES)})")
    kind = frameworks.sniff(path)
    if kind is not None:
        return kind
    return "engine" if set(ENGINE_REQUIRED) <= _names(path) else "generic"


def _names(path: Path) -> set:
    if path.suffix.lower() == ".parquet":
        return set(_parquet(path).schema_arrow.names)
    first = next(cols.jsonl_records(path, 1), None)
    return set(first[0]) if first else set()


def open_dumps(files, fmt: str = "auto") -> list[Dump]:
    """:func:`open_dump` of each file, with ``fmt`` (one of :data:`FORMATS`); the slime files
    share one record of the samples read, so a sample that several ranks wrote counts once."""
    seen: set = set()
    return [open_dump(Path(f), fmt, seen) for f in files]


def open_dump(path: Path, fmt: str = "auto", seen: set | None = None) -> Dump:
    """Check one file before reading it: its format (``fmt``, or detected when ``auto``), that
    it is parquet / JSON lines / a slime ``.pt``, that it has rows and the columns of its format.
    Raises ``ValueError`` naming the file."""
    from tailtheory.diagnose import frameworks

    if fmt not in FORMATS:
        raise ValueError(f"unknown --format {fmt!r} (expected one of {', '.join(FORMATS)})")
    kind = detect(path)
    if fmt in frameworks.FRAMEWORKS and kind not in frameworks.FRAMEWORKS:
        _check_framework(path, fmt)                       # names what the file lacks
    if fmt != "auto" and kind != fmt and not {kind, fmt} <= {"engine", "generic"}:
        raise ValueError(f"{path}: --format {fmt}, but this file is a {kind} dump; pass "
                         f"--format {kind} or auto")
    kind = fmt if fmt in frameworks.FRAMEWORKS else kind
    if kind in frameworks.FRAMEWORKS:
        _check_framework(path, kind)
        return Dump(path, SUFFIXES[path.suffix.lower()], kind, None, (), seen=seen)
    dump = _open_columns(path)
    if fmt in ("engine", "generic") and dump.kind != fmt:
        need = ENGINE_REQUIRED if fmt == "engine" else REQUIRED
        raise ValueError(f"{path}: --format {fmt}, but the file lacks the columns "
                         f"{', '.join(c for c in need if c not in _names(path))}")
    return dump


def _open_columns(path: Path) -> Dump:
    """:func:`open_dump` of a generic or engine file."""


    fmt = SUFFIXES[path.suffix.lower()]
    if fmt == "parquet":
        import pyarrow as pa

        pf = _parquet(path)
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
    kind = "engine" if set(ENGINE_REQUIRED) <= names else "generic"
    if kind == "generic":
        missing = [c for c in _required(seq_rows) if c not in names]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (a generic dump "
                             f"needs {', '.join(REQUIRED)}; an engine dump "
                             f"{', '.join(ENGINE_REQUIRED)}; the formats read are "
                             f"{', '.join(FORMATS[1:])}, see docs/diagnose.md)")
    topk = tuple(c for c in TOPK if c in names and kind == "generic")
    return Dump(path, fmt, kind, rows, topk, seq_rows and kind == "generic",
                _first_len(path, fmt, topk[0]) if topk else 0)


def _first_len(path: Path, fmt: str, c: str) -> int:
    """Length of the first row's list in column ``c`` (a per-token list; in sequence rows, the
    first token's), or 0 when it is not a list."""
    if fmt == "parquet":
        first = next(_parquet(path).iter_batches(batch_size=1, columns=[c])).column(0)[0].as_py()
    else:
        first = next(cols.jsonl_records(path, 1))[0].get(c)
    while isinstance(first, list) and first and isinstance(first[0], list):
        first = first[0]
    return len(first) if isinstance(first, list) else 0


def _required(seq_rows: bool) -> tuple[str, ...]:
    """Sequence rows may leave ``position`` out (it defaults to 0..n-1)."""
    return tuple(c for c in REQUIRED if not (seq_rows and c == "position"))


def _parquet(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # ArrowInvalid, OSError: a foreign, torn or unreadable file
        raise ValueError(f"{path}: not a readable parquet file ({exc})") from None


def _jsonl_tables(path: Path, chunk: int, need: tuple[str, ...]):
    import pyarrow as pa

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


def iter_batches(dump: Dump, file: int, batch_rows: int = BATCH_ROWS) -> Iterator[Batch]:
    """The file's token rows, ``batch_rows`` (or one sequence row's tokens more) at a time;
    never the whole file at once."""
    import pyarrow as pa

    from tailtheory.diagnose import frameworks

    if dump.kind in frameworks.FRAMEWORKS:
        for tbl in framework_tables(dump.path, dump.kind, batch_rows, dump.seen):
            yield _to_batch(tbl, dump, file)
        return
    if dump.topk_k:
        batch_rows = max(1, min(batch_rows, TOPK_VALUES // dump.topk_k))
    if dump.fmt == "parquet":
        pf = _parquet(dump.path)
        try:
            for rb in pf.iter_batches(batch_size=batch_rows):
                yield _to_batch(pa.Table.from_batches([rb]), dump, file)
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"{dump.path}: cannot read a row group ({exc})") from None
    else:
        need = ENGINE_REQUIRED if dump.kind == "engine" else _required(dump.seq_rows)
        for tbl in _jsonl_tables(dump.path, batch_rows, need):
            yield _to_batch(tbl, dump, file)


def _to_batch(tbl, dump: Dump, file: int) -> Batch:
    import pyarrow as pa

    if dump.kind == "generic" and pa.types.is_list(tbl.schema.field("logp_train").type):
        tbl = cols.explode(tbl, dump.path)
    path, n = dump.path, tbl.num_rows
    col = {v: k for k, v in ENGINE_TO_GENERIC.items()} if dump.kind == "engine" else {}
    name = lambda g: col.get(g, g)  # noqa: E731  (the file's name of a generic column)
    has = lambda g: name(g) in tbl.column_names  # noqa: E731
    roll = cols.floats(tbl, name("logp_rollout"), path)
    if dump.kind == "engine":
        log_rho = cols.floats(tbl, "log_rho", path)
        train, checked = roll + log_rho, {"logp_roll": roll, "log_rho": log_rho}
    else:
        train = cols.floats(tbl, "logp_train", path)
        log_rho, checked = train - roll, {"logp_train": train, "logp_rollout": roll}
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
                 ok=ok, bad={c: int((~f).sum()) for c, f in finite.items() if (~f).any()})


def _check_framework(path: Path, kind: str) -> None:
    from tailtheory.diagnose import frameworks
    from tailtheory.diagnose.slime import slime_samples

    if kind == "slime":
        slime_samples(path)                               # loads and checks the whole file
    else:
        frameworks.check(path, kind)


def framework_tables(path: Path, kind: str, batch_rows: int, seen: set | None = None) -> Iterator:
    """Token rows of one framework dump as arrow tables in the generic names, about
    ``batch_rows`` rows each (a response is never split). ``seen``, shared by the slime files
    of one run, skips a sample that another rank's file already gave."""
    from tailtheory.diagnose import frameworks
    from tailtheory.diagnose.slime import slime_rows

    rows = {"nemo-rl": frameworks.nemo_rl_rows, "prime-rl": frameworks.prime_rl_rows,
            "slime": lambda p: slime_rows(p, seen)}[kind]
    buf, n = [], 0
    for part in rows(path):
        buf.append(part)
        n += len(part["logp_train"])
        if n >= batch_rows:
            yield _arrow_table(buf)
            buf, n = [], 0
    if buf:
        yield _arrow_table(buf)


def _arrow_table(parts: list[dict]):
    import pyarrow as pa

    arrays = {}
    for k in [k for k in parts[0] if all(k in p for p in parts)]:
        vals = np.concatenate([np.asarray(p[k]) for p in parts])
        arrays[k] = pa.array(vals.tolist() if vals.dtype == object else vals)
    return pa.table(arrays)


__all__ = ["REQUIRED", "OPTIONAL", "TOPK", "ENGINE_TO_GENERIC", "FORMATS",
           "Dump", "Batch", "expand_dumps", "detect", "open_dumps", "open_dump", "iter_batches",
           "BATCH_ROWS"]
