"""Arrow columns of a dump as checked numpy arrays (:mod:`tailtheory.diagnose.read`'s formats).

Source: the generic dump format of :mod:`tailtheory.diagnose.read` (TIM arXiv 2605.14220 for
its log-probs, DVP arXiv 2512.23087 for its top-k lists). Each function names the file and the
column in its ``ValueError``.

Shapes: a column of ``n`` rows -> ``(n,)``; a list column -> ``(n, k_max)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np

TOPK = ("topk_logp_rollout", "topk_logp_train")
"""Optional top-k columns of DVP's section (the sampler's list first: DVP prunes the sampler)."""
TOPK_MASS_TOL = 1e-2
"""A top-k list may hold at most ``1 + TOPK_MASS_TOL`` of probability (rounding of low-precision
log-probs); more means the entries are not log-probabilities over the vocabulary."""


def _column(tbl, c: str):
    return tbl.column(c).combine_chunks()


def ints(tbl, c: str, path: Path) -> np.ndarray:
    """Column ``c`` as int64: integers, or floats that are whole numbers; no nulls.
    Shapes: (n,) -> (n,)."""
    import pyarrow as pa

    a = _column(tbl, c)
    if a.null_count:
        raise ValueError(f"{path}: column {c} has {a.null_count} empty (null) value(s)")
    if pa.types.is_integer(a.type):
        return a.to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_floating(a.type):
        v = a.to_numpy(zero_copy_only=False)
        if np.all(np.isfinite(v) & (v == np.round(v))):
            return v.astype(np.int64)
    raise ValueError(f"{path}: column {c} must hold integers, got {a.type}")


def ids(tbl, c: str, path: Path) -> np.ndarray:
    """``sample_id``: strings (an object array) or integers; no nulls. Shapes: (n,) -> (n,)."""
    import pyarrow as pa

    a = _column(tbl, c)
    if pa.types.is_string(a.type) or pa.types.is_large_string(a.type):
        if a.null_count:
            raise ValueError(f"{path}: column {c} has {a.null_count} empty (null) value(s)")
        return np.asarray(a.to_pylist(), dtype=object)
    return ints(tbl, c, path)


def floats(tbl, c: str, path: Path) -> np.ndarray:
    """Column ``c`` as float64 with nulls as NaN (a ``null`` log-prob is an unscored token).
    Shapes: (n,) -> (n,)."""
    import pyarrow as pa

    a = _column(tbl, c)
    t = a.type
    if not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_null(t)):
        raise ValueError(f"{path}: column {c} must hold numbers, got {a.type}")
    return np.asarray(a.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False),
                      dtype=np.float64)


def padded(tbl, c: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A list column as ``(n, k_max)`` float64, padded with ``-inf`` (null entries are NaN),
    and the lists' lengths ``(n,)``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    a = _column(tbl, c)
    if not pa.types.is_list(a.type) and not pa.types.is_large_list(a.type):
        raise ValueError(f"{path}: column {c} must hold lists of log-probs, got {a.type}")
    lens = pc.list_value_length(a)
    if lens.null_count or pc.min(lens).as_py() == 0:
        raise ValueError(f"{path}: column {c} has an empty or null list in "
                         f"{lens.null_count + int(pc.sum(pc.equal(lens, 0)).as_py() or 0)} row(s)")
    lens = lens.to_numpy(zero_copy_only=False).astype(np.int64)
    flat = a.flatten()
    if not (pa.types.is_floating(flat.type) or pa.types.is_integer(flat.type)):
        raise ValueError(f"{path}: column {c} must hold lists of numbers, got {a.type}")
    vals = flat.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    out = np.full((len(lens), int(lens.max())), -np.inf)
    rows = np.repeat(np.arange(len(lens)), lens)
    out[rows, np.arange(len(vals)) - np.repeat(np.cumsum(lens) - lens, lens)] = vals
    return out, lens


def check_topk(topk: dict[str, tuple[np.ndarray, np.ndarray]], path: Path) -> None:
    """Both top-k lists of a row have one length; no list holds more than probability 1."""
    if len(topk) == 2:
        (a, la), (b, lb) = topk.values()
        diff = la != lb
        if diff.any():
            row = int(np.flatnonzero(diff)[0])
            raise ValueError(f"{path}: {TOPK[0]} and {TOPK[1]} have different lengths (first "
                             f"at row {row} of a batch): they must list the same tokens")
    for c, (v, _) in topk.items():
        with np.errstate(invalid="ignore"):
            mass = np.logaddexp.reduce(np.where(np.isnan(v), -np.inf, v), axis=1)
        over = mass > np.log1p(TOPK_MASS_TOL)
        if over.any():
            raise ValueError(f"{path}: column {c} holds more than probability 1 in "
                             f"{int(over.sum())} row(s) (up to {float(np.exp(mass.max())):.4g}): "
                             f"its entries must be log-probabilities over the full vocabulary")


def explode(tbl, path: Path):
    """Sequence rows -> token rows: per-token lists flattened, scalars repeated, ``position``
    ``0..n-1`` unless given. Lists of one row must have one length."""
    import pyarrow as pa
    import pyarrow.compute as pc

    is_list = lambda c: pa.types.is_list(tbl.schema.field(c).type)  # noqa: E731
    listed = [c for c in tbl.column_names if is_list(c)]
    for c in ("token_id", "logp_rollout") + tuple(c for c in ("position",) + TOPK
                                                   if c in tbl.column_names):
        if c not in listed or (c in TOPK and not pa.types.is_list(tbl.schema.field(c).type
                                                                   .value_type)):
            raise ValueError(f"{path}: logp_train holds lists (one row per response) but {c} "
                             f"does not hold {'lists of lists' if c in TOPK else 'lists'}: "
                             f"per-token columns must all be lists")
    lens = {c: pc.list_value_length(tbl.column(c)) for c in listed}
    for c, v in lens.items():
        if v.null_count:
            raise ValueError(f"{path}: column {c} has {v.null_count} null list(s)")
    lens = {c: v.to_numpy().astype(np.int64) for c, v in lens.items()}
    ref = lens["logp_train"]
    for c, v in lens.items():
        bad = np.flatnonzero(v != ref)
        if len(bad):
            i = int(bad[0])
            sid = tbl.column("sample_id")[i].as_py() if "sample_id" in tbl.column_names else "?"
            raise ValueError(f"{path}: row {i} of a batch (sample_id {sid!r}): {c} has {v[i]} "
                             f"entries but logp_train has {ref[i]}: the per-token lists of a "
                             f"response must have one length")
    parent = pa.array(np.repeat(np.arange(tbl.num_rows), ref))
    cols = {c: (pc.list_flatten(tbl.column(c)) if c in listed else tbl.column(c).take(parent))
            for c in tbl.column_names}
    if "position" not in cols:
        start = np.repeat(np.cumsum(ref) - ref, ref)                 # first token of each row
        cols["position"] = pa.array(np.arange(int(ref.sum())) - start)
    return pa.table(cols)


def jsonl_records(path: Path, chunk: int) -> Iterator[list[dict]]:
    """Chunks of ``chunk`` JSON objects (blank lines skipped); line numbers in errors."""
    recs: list[dict] = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path} line {i}: not JSON ({exc.msg})") from None
                if not isinstance(rec, dict):
                    raise ValueError(f"{path} line {i}: expected a JSON object, got "
                                     f"{type(rec).__name__}")
                recs.append(rec)
                if len(recs) == chunk:
                    yield recs
                    recs = []
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 JSON lines file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if recs:
        yield recs
