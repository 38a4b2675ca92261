"""This engine's dumps: ``tailtheory train --dump-tokens`` writes ``RUN/tokens/step_*.parquet``
(:func:`tailtheory.engine.trainer.dump_tokens`), read as token rows of the generic format.

Source: TIM (arXiv 2605.14220) for ``log_rho = log pi_train - log pi_roll``
(``tailtheory.engine.types.PolicyBatch.log_rho``). :data:`ENGINE_TO_GENERIC` maps its columns
onto the generic names, the one place they meet; ``logp_train = logp_roll + log_rho`` under
either ``--pi-old`` mode (``logp_old`` is the rollout's under ``--pi-old bypass`` and is not
read). ``weight``, the product of the correction methods' token weights the step applied (1:
none; ``min(prod_t rho_t, C)`` under ``seq_tis``, ``prod_t rho_t`` or 0 under ``mis``, ...), is
the engine's own logged importance ratio, read as the generic ``logged_ratio``. A run directory
or its ``tokens`` folder may be given instead of the files. A table is an engine dump when it has
every column of :data:`ENGINE_REQUIRED`.
"""

from __future__ import annotations

from pathlib import Path

from tailtheory.diagnose import columns as cols
from tailtheory.diagnose.formats.base import (Dump, column_names, first_found, missing_columns,
                                              stored_precision, table_batches, table_info,
                                              to_batch)
from tailtheory.diagnose.formats.registry import Reader

NAME = "engine"
ENGINE_REQUIRED = ("step", "seq", "t", "token", "logp_roll", "log_rho")
"""Columns of the engine's dump this reader needs."""
ENGINE_TO_GENERIC = {"step": "step", "seq": "sample_id", "t": "position", "token": "token_id",
                     "logp_roll": "logp_rollout", "adv": "advantage", "weight": "logged_ratio"}
"""Engine column -> generic name; ``logp_train = logp_roll + log_rho`` (``log_rho = log pi_train
- log pi_roll``, ``tailtheory.engine.types.PolicyBatch.log_rho``, under either ``pi_old`` mode;
``logp_old`` is the rollout's under ``--pi-old bypass`` and is not read)."""
SHOWN = {"logp_train": "logp_roll + log_rho (logp_train)", "logp_rollout": "logp_roll"}
"""How an engine dump holds each generic log-prob column (named in errors)."""
PATTERNS = ("tokens/step_*.parquet", "step_*.parquet")
"""Its files in a run directory, or in its ``tokens`` folder."""


def find(folder: Path) -> list[Path]:
    """``folder/tokens/step_*.parquet`` (a run directory), else ``folder/step_*.parquet``,
    sorted."""
    return first_found(folder, PATTERNS, sorted)


def sniff(path: Path) -> bool:
    """Whether the table has every column of :data:`ENGINE_REQUIRED`."""
    return set(ENGINE_REQUIRED) <= column_names(path)


def check(path: Path) -> Dump:
    """An engine table with rows and the columns of :data:`ENGINE_REQUIRED`; ``ValueError``
    naming the file otherwise."""
    fmt, names, rows, _ = table_info(path)
    missing = [c for c in ENGINE_REQUIRED if c not in names]
    if missing:
        raise missing_columns(path, missing)
    return Dump(path, fmt, NAME, rows, (),
                precision=stored_precision(path, fmt, ("logp_roll", "log_rho")),
                lacks=() if "weight" in names else ("logged_ratio",))


def to_engine_batch(tbl, dump: Dump, file: int):
    """A :class:`~tailtheory.diagnose.formats.base.Batch` of an engine table:
    ``logp_train = logp_roll + log_rho``; its non-finite values are counted under the file's
    own names."""
    roll = cols.floats(tbl, "logp_roll", dump.path)
    log_rho = cols.floats(tbl, "log_rho", dump.path)
    return to_batch(tbl, dump, file, roll + log_rho, log_rho,
                    {"logp_roll": roll, "log_rho": log_rho},
                    {v: k for k, v in ENGINE_TO_GENERIC.items()})


def rows(dump: Dump, file: int, batch_rows: int):
    """The file's token rows, ``batch_rows`` at a time."""
    return table_batches(dump, file, batch_rows, ENGINE_REQUIRED, to_engine_batch)


READER = Reader(NAME, "this engine's tailtheory train --dump-tokens",
                (".parquet", ".jsonl"), PATTERNS, find, sniff, check, rows,
                required=ENGINE_REQUIRED, tabular=True, shown=SHOWN, ratio="weight")
