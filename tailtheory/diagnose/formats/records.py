"""What the readers of frameworks' own dumps share: per-sample records (a JSON line, a dict of
a ``.pt`` file) checked key by key and renamed into the generic names, then gathered into
batches.

Each framework reader keeps the response tokens the framework trained on, takes the framework's
names for them, and renames them once through its own map (:func:`to_generic`). Sign convention
everywhere: ``logp_train`` is the trainer's recomputed log-prob of the sampled token,
``logp_rollout`` the inference engine's, so ``log rho = logp_train - logp_rollout`` and DVP's
``Delta = logp_rollout - logp_train``.

Memory: records are read one at a time and emitted in batches of about ``batch_rows`` token rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from tailtheory.diagnose.columns import jsonl_records
from tailtheory.diagnose.formats.base import JSON_PRECISION, Batch, Dump, batch_of


def to_generic(names: dict[str, str], src: dict, n: int) -> dict:
    """One response's arrays under a framework's names -> generic names (``names``: framework
    key -> generic name); scalars are repeated over its ``n`` rows."""
    out = {"position": np.asarray(src["position"])}
    for name, generic in names.items():
        if name in src and src[name] is not None:
            v = src[name]
            out[generic] = np.full(n, v, dtype=object if isinstance(v, str) else None) \
                if np.ndim(v) == 0 else np.asarray(v)
    return out


def float_array(v, path, where, key) -> np.ndarray:
    """``v`` as a 1-d float64 array; anything else is one ``ValueError`` naming ``path``,
    ``where`` (the line or sample) and ``key``."""
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{path} {where}: {key} must hold numbers") from None
    if a.ndim != 1:
        raise ValueError(f"{path} {where}: {key} must be a list of numbers (one per token), "
                         f"got shape {a.shape}")
    return a


def int_array(v, path, where, key) -> np.ndarray:
    """:func:`float_array` of whole numbers, as int64."""
    a = float_array(v, path, where, key)
    if not np.all(np.isfinite(a) & (a == np.round(a))):
        raise ValueError(f"{path} {where}: {key} must hold integers")
    return a.astype(np.int64)


def same_length(arrays: dict, path, where) -> int:
    """The common length of the per-token ``arrays``; ``ValueError`` naming each length when
    they differ."""
    lens = {k: len(v) for k, v in arrays.items()}
    if len(set(lens.values())) > 1:
        raise ValueError(f"{path} {where}: per-token lists of different lengths "
                         f"({', '.join(f'{k} {n}' for k, n in lens.items())}); they must align")
    return next(iter(lens.values()))


def scalar(v):
    """``[[x]]`` -> ``x``: a value unwrapped from one-element lists."""
    while isinstance(v, list) and len(v) == 1:
        v = v[0]
    return v


def lines(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` of each JSON line of ``path``."""
    for i, recs in enumerate(jsonl_records(path, 1), 1):
        yield i, recs[0]


def first_keys(path: Path) -> set:
    """The keys of the first record of a JSON lines file (empty when it has none)."""
    first = next(jsonl_records(path, 1), None)
    return set(first[0]) if first else set()


def check_first_line(path: Path, kind: str, need, hint: Callable[[list], str], *,
                     ratio: str = "", step: bool = True) -> Dump:
    """A JSON lines dump of ``kind`` whose first record has the keys ``need``; ``ValueError``
    naming the file and the keys it lacks (``hint(missing)`` appended) otherwise. Its
    ``lacks``: ``logged_ratio`` unless the first record's key ``ratio`` holds a value, ``step``
    when the file cannot give one (``step`` False)."""
    if path.suffix.lower() != ".jsonl":
        raise ValueError(f"{path}: a {kind} dump is a .jsonl file, got {path.suffix!r}")
    first = next(jsonl_records(path, 1), None)
    if first is None:
        raise ValueError(f"{path}: the dump has no rows")
    missing = [k for k in need if k not in first[0]]
    if missing:
        raise ValueError(f"{path}: not a {kind} dump: line 1 lacks {', '.join(missing)}"
                         f"{hint(missing)}")
    logged = isinstance(first[0].get(ratio), list) and any(x is not None for x in first[0][ratio])
    lacks = ("step",) * (not step) + ("logged_ratio",) * (not logged)
    return Dump(path, "jsonl", kind, None, (), precision=JSON_PRECISION, lacks=lacks)


def record_batches(parts: Iterable[dict], dump: Dump, file: int,
                   batch_rows: int) -> Iterator[Batch]:
    """Responses in the generic names (:func:`to_generic`) gathered into batches of about
    ``batch_rows`` token rows (a response is never split)."""
    buf, n = [], 0
    for part in parts:
        buf.append(part)
        n += len(part["logp_train"])
        if n >= batch_rows:
            yield batch_of(_arrow_table(buf), dump, file)
            buf, n = [], 0
    if buf:
        yield batch_of(_arrow_table(buf), dump, file)


def _arrow_table(parts: list[dict]):
    arrays = {}
    for k in [k for k in parts[0] if all(k in p for p in parts)]:
        vals = np.concatenate([np.asarray(p[k]) for p in parts])
        arrays[k] = pa.array(vals.tolist() if vals.dtype == object else vals)
    return pa.table(arrays)
