"""The generic format of ``tailtheory diagnose``: the one every other format is read into.

Source: TIM (arXiv 2605.14220) for the quantity, ``log_rho = log pi_train - log pi_roll`` of the
sampled token; DVP (arXiv 2512.23087) for the top-k lists. Written by
:mod:`tailtheory.integrations` for TRL and verl runs (recipes: ``docs/diagnose.md``).

A ``.parquet`` file, or ``.jsonl`` (one JSON object per line), in one of two shapes:

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
  ``logged_ratio``    float  optional: the framework's own importance ratio of the token as it
                             logged it (a per-token ratio, or its response's sequence ratio on
                             every token); NaN where not logged; never excludes a row
  ==================  =====  =====================================================================

- *sequence rows*, one row per response: ``sample_id``, ``step``, ``reward`` as scalars, and
  ``token_id``, ``logp_train``, ``logp_rollout`` (optional ``position``, default ``0..n-1``;
  ``advantage`` and ``logged_ratio``, a list or one scalar for every token; ``topk_*`` as lists
  of lists) as lists of one length per row. The shape is read from ``logp_train``: a list
  means sequence rows.

A ``null`` log-prob is NaN (TRL writes vLLM's unscored tokens so). Rows whose log-probs (or
top-k entries) are NaN or +-inf are *excluded*, counted per column, never averaged in. This is
the fallback reader: a file no other reader claims is read as generic, and refused with the
columns it lacks.
"""

from __future__ import annotations

from pathlib import Path

from tailtheory.diagnose.columns import TOPK
from tailtheory.diagnose.formats.base import (SOMETIMES, Dump, batch_of, first_len,
                                              missing_columns, stored_precision, table_batches,
                                              table_info)
from tailtheory.diagnose.formats.registry import Reader

NAME = "generic"
REQUIRED = ("sample_id", "position", "token_id", "logp_train", "logp_rollout")
"""Columns every generic dump has."""
OPTIONAL = ("advantage", "reward", "step", "logged_ratio")
"""Generic columns read when present."""
PATTERNS = ("*.parquet", "*.jsonl")
"""Its files in a folder: every parquet and JSON lines file."""


def required(seq_rows: bool) -> tuple[str, ...]:
    """:data:`REQUIRED`, less ``position`` in sequence rows (it defaults to ``0..n-1``)."""
    return tuple(c for c in REQUIRED if not (seq_rows and c == "position"))


def find(folder: Path) -> list[Path]:
    """Every ``*.parquet`` and ``*.jsonl`` file of ``folder``, sorted."""
    return sorted(f for p in PATTERNS for f in folder.glob(p))


def check(path: Path) -> Dump:
    """A generic table with rows and the columns of its shape; ``ValueError`` naming the file
    and the columns it lacks otherwise."""
    fmt, names, rows, seq_rows = table_info(path)
    missing = [c for c in required(seq_rows) if c not in names]
    if missing:
        raise missing_columns(path, missing)
    topk = tuple(c for c in TOPK if c in names)
    return Dump(path, fmt, NAME, rows, topk, seq_rows,
                first_len(path, fmt, topk[0]) if topk else 0,
                precision=stored_precision(path, fmt, ("logp_train", "logp_rollout")),
                lacks=tuple(c for c in SOMETIMES if c not in names))


def rows(dump: Dump, file: int, batch_rows: int):
    """The file's token rows, ``batch_rows`` (or one sequence row's tokens more) at a time."""
    return table_batches(dump, file, batch_rows, required(dump.seq_rows), batch_of)


READER = Reader(NAME, "the generic format (TRL and verl runs, through integrations)",
                (".parquet", ".jsonl"), PATTERNS, find, lambda path: True, check, rows,
                required=REQUIRED, tabular=True, fallback=True, ratio="logged_ratio")
