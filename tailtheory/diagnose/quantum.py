"""How a dump's stored log-probs are rounded, and the most that rounding moves a token's
``Delta``: the storage quantum an envelope is widened by.

Source: what each format stores (:attr:`~tailtheory.diagnose.formats.base.Dump.precision`: a
parquet column's or a tensor's float type, ``JSON-rounded decimals`` for JSON lines). A binary
file's float type says its quantum; a JSON lines file's does not (its writer may have printed
every digit of a float64, of a float32 or bfloat16 value, or rounded to a few decimals), so it
is read from the values of its first :data:`PEEK_ROWS` rows (:func:`storage_of`).

Kinds: ``bfloat16``, ``float16``, ``float32``, ``float64`` (a stored value is within
``UNIT x |x|`` of the exact one) and ``decimals:D`` (within ``10^-D / 2``).

Shapes: ``(n,)`` per token.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import torch

from tailtheory.diagnose.formats.base import Batch, Dump
from tailtheory.diagnose.read import iter_batches

PEEK_ROWS = 4096
"""Rows of a JSON lines file read to find how its writer rounded the log-probs."""
MAX_DECIMALS = 9
"""Most decimals a JSON writer's rounding is looked for at."""
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -24,
        "float64": 2.0 ** -53}
"""Unit roundoff of each float type: a stored value is within ``UNIT x |x|`` of the exact one."""
STORAGE_WORDS = {"bfloat16": "bfloat16, 2^-8 |log p|", "float16": "float16, 2^-11 |log p|",
                 "float32": "float32, 2^-24 |log p|", "float64": "float64, 2^-53 |log p|"}
"""Each float kind in words, with its quantum per log-prob."""


def storage_of(train, roll) -> str:
    """How a writer stored log-probs, from the values: ``bfloat16``, ``float16``, ``float32``
    (every value representable), ``decimals:D`` (every value on the ``10^-D`` grid, ``D <=
    MAX_DECIMALS``), else ``float64``; the first that holds, coarsest first. A value within a
    few float64 ulps counts as on the grid (``roll`` may be read back as ``train - log rho``).
    Shapes: train, roll (n,) -> str."""
    fin = np.isfinite(train) & np.isfinite(roll)
    x = np.concatenate([train[fin], roll[fin]])
    if not (x != 0).any():
        return "float64"
    tol = np.tile(16 * np.spacing(np.maximum(np.abs(train[fin]), np.abs(roll[fin]))), 2)
    on = lambda y: bool((np.abs(y - x) <= tol).all())  # noqa: E731
    t = torch.from_numpy(x)
    for kind in ("bfloat16", "float16", "float32"):
        if on(t.to(getattr(torch, kind)).double().numpy()):
            return kind
    for d in range(MAX_DECIMALS + 1):
        if on(np.round(x, d)):
            return f"decimals:{d}"
    return "float64"


def storage_of_precision(precision: str) -> str | None:
    """The coarsest float type a dump's stored precision names
    (:attr:`~tailtheory.diagnose.formats.base.Dump.precision`; ``bfloat16 as stored``,
    ``logp_train float64, logp_rollout float32 as stored``), else ``None``."""
    found = [k for k in UNIT if re.search(rf"\b{k}\b", precision or "")]
    return max(found, key=UNIT.get) if found else None


def quantum_of(kind: str, train, roll) -> np.ndarray:
    """The most that storing each token's two log-probs as ``kind`` (:func:`storage_of`) moves
    its ``Delta``: ``10^-D`` for ``D`` decimals, ``UNIT x (|log p_train| + |log p_roll|)`` for a
    float type. Shapes: (n,) -> (n,)."""
    if kind.startswith("decimals:"):
        return np.full(len(train), 10.0 ** -int(kind.split(":")[1]))
    return UNIT[kind] * (np.abs(train) + np.abs(roll))


def dump_storage(dump: Dump | None, b: Batch) -> str:
    """How the file of batch ``b`` stores its log-probs: its stored float type (parquet,
    ``.pt``: :func:`storage_of_precision`, ``float64`` when it names none), else the values of
    its first :data:`PEEK_ROWS` rows (JSON lines, read again from the start; without the opened
    ``dump``, the values of ``b``) by :func:`storage_of`. The same answer at any batch size."""
    if dump is not None and dump.fmt != "jsonl":
        return storage_of_precision(dump.precision) or "float64"
    if dump is not None:
        b = next(iter_batches(replace(dump, seen=None), b.file, PEEK_ROWS))
    return storage_of(b.logp_train[b.ok], (b.logp_train - b.log_rho)[b.ok])


def storage_words(kind: str) -> str:
    """A kind of :func:`storage_of` in words, with its quantum."""
    if kind.startswith("decimals:"):
        d = int(kind.split(":")[1])
        return f"JSON decimals rounded to {d} place{'s' * (d != 1)}, 1e-{d} per Delta"
    return STORAGE_WORDS[kind]
