"""prime-rl's token exports, read as token rows of the generic format
(:mod:`tailtheory.diagnose.formats.records` for the sign convention).

**prime-rl** (``PrimeIntellect-ai/prime-rl``; schema: ``src/prime_rl/trainer/rl/token_export.py``,
``SCHEMA_VERSION = 1``; switch: ``enable_token_export`` in
``packages/prime-rl-configs/src/prime_rl/configs/trainer.py``; alignment:
``src/prime_rl/trainer/rl/train.py``). ``OUTPUT_DIR/token_exports/step_{S}/rank_{R}.jsonl``, one
JSON line per sequence: ``step``, ``rank``, ``export_sequence_idx`` (unique within the file), and
per-token lists of one length: ``token_ids`` (prompt and completion), ``loss_mask``,
``inference_logprobs`` (the engine's; 0 on prompt tokens), ``trainer_logprobs`` (the trainer's
training forward, shifted so index ``t`` is token ``t``), ``advantages``, ``mismatch_kl``
(``exp(r) - r - 1`` with ``r = trainer - inference``, TIM's k3), ``rl_weights`` /
``ref_kl_weights`` (null: the defaults) and more. Non-finite floats are written as null (NaN
here: excluded, counted). Rows: ``loss_mask`` tokens that were sampled by the policy (a non-zero
``rl_weights`` or ``ref_kl_weights`` where those are given, as prime-rl's own ``mismatch_kl``
metric selects them). ``mismatch_kl`` is checked against the log-probs (it fixes the sign and
the alignment); no reward is read. Newer exports also hold prime-rl's per-token
``importance_ratio`` (``exp(trainer - inference)``, from its
``compute_importance_ratio_and_mismatch_kl``), read as the generic ``logged_ratio`` where given.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

from tailtheory.diagnose.formats.base import Dump, first_found
from tailtheory.diagnose.formats.records import (check_first_line, first_keys, float_array,
                                                 int_array, lines, record_batches, same_length,
                                                 to_generic)
from tailtheory.diagnose.formats.registry import Reader

NAME = "prime-rl"
TO_GENERIC = {"step": "step", "export_sequence_idx": "sample_id", "token_ids": "token_id",
              "trainer_logprobs": "logp_train", "inference_logprobs": "logp_rollout",
              "advantages": "advantage", "importance_ratio": "logged_ratio"}
"""prime-rl key -> generic name; ``position`` counts from the first ``loss_mask`` token;
prime-rl exports no reward."""
PRIME_RL_KEYS = ("step", "token_ids", "loss_mask", "inference_logprobs", "trainer_logprobs")
"""Keys of a prime-rl token export line this reader needs."""
MISMATCH_KL_TOL = (1e-4, 1e-2)
"""prime-rl's ``mismatch_kl`` must equal ``exp(r) - r - 1`` of the exported log-probs within
``atol + rtol * |mismatch_kl|`` (float32 rounding); more than ``MISMATCH_KL_BAD`` of the tokens
outside it means the columns are not aligned as documented."""
MISMATCH_KL_BAD = 0.01
PATTERNS = ("token_exports/step_*/rank_*.jsonl", "step_*/rank_*.jsonl", "rank_*.jsonl")
"""Its files in a run's output folder, its ``token_exports`` folder or one step's folder."""


def find(folder: Path) -> list[Path]:
    """The first of :data:`PATTERNS` that matches under ``folder``, in step and rank order."""
    return first_found(folder, PATTERNS)


def sniff(path: Path) -> bool:
    """A ``step_{S}/rank_{R}.jsonl``, or a first line with both log-prob keys."""
    named = re.fullmatch(r"rank_\d+\.jsonl", path.name) and re.fullmatch(r"step_\d+",
                                                                         path.parent.name)
    return bool(named) or {"inference_logprobs", "trainer_logprobs"} <= first_keys(path)


def check(path: Path) -> Dump:
    """A JSON lines file whose first line has :data:`PRIME_RL_KEYS`; ``ValueError`` naming what
    it lacks otherwise."""
    return check_first_line(path, NAME, PRIME_RL_KEYS, lambda missing: "",
                            ratio="importance_ratio")


def prime_rl_rows(path: Path) -> Iterator[dict]:
    """One dict of generic arrays per sequence of a prime-rl token export (its ``loss_mask``
    tokens the policy sampled), its ``mismatch_kl`` checked against the log-probs."""
    for i, rec in lines(path):
        where = f"line {i}"
        missing = [k for k in PRIME_RL_KEYS if k not in rec]
        if missing:
            raise ValueError(f"{path} {where}: lacks {', '.join(missing)} (not a prime-rl "
                             f"token export line)")
        arr = {k: (int_array if k == "token_ids" else float_array)(rec[k], path, where, k)
               for k in PRIME_RL_KEYS if k != "step"}
        for k in ("advantages", "mismatch_kl", "rl_weights", "ref_kl_weights", "importance_ratio"):
            if isinstance(rec.get(k), list) and any(x is not None for x in rec[k]):
                arr[k] = float_array(rec[k], path, where, k)
        same_length(arr, path, where)
        loss = arr["loss_mask"] != 0
        sampled = loss.copy()
        if "rl_weights" in arr or "ref_kl_weights" in arr:
            sampled = arr["rl_weights"] != 0 if "rl_weights" in arr else loss
            if "ref_kl_weights" in arr:
                sampled = sampled | (arr["ref_kl_weights"] != 0)
        keep = np.flatnonzero(loss & sampled)
        if len(keep) == 0:
            continue
        if "mismatch_kl" in arr:
            _check_mismatch_kl(arr, keep, path, where)
        src = {k: arr[k][keep] for k in ("token_ids", "inference_logprobs", "trainer_logprobs",
                                         "advantages", "importance_ratio") if k in arr}
        first = np.flatnonzero(loss)[0]
        src.update(step=int(int_array([rec["step"]], path, where, "step")[0]),
                   export_sequence_idx=rec.get("export_sequence_idx", i - 1),
                   position=keep - first)
        yield to_generic(TO_GENERIC, src, len(keep))


def _check_mismatch_kl(arr: dict, keep: np.ndarray, path, where) -> None:
    r = arr["trainer_logprobs"][keep] - arr["inference_logprobs"][keep]
    mkl = arr["mismatch_kl"][keep]
    ok = np.isfinite(r) & np.isfinite(mkl)
    if not ok.any():
        return
    with np.errstate(over="ignore", invalid="ignore"):
        k3 = np.expm1(r[ok]) - r[ok]
    atol, rtol = MISMATCH_KL_TOL
    bad = ~(np.abs(k3 - mkl[ok]) <= atol + rtol * np.abs(mkl[ok]))
    if bad.sum() > max(1, MISMATCH_KL_BAD * ok.sum()):
        raise ValueError(f"{path} {where}: mismatch_kl disagrees with exp(r) - r - 1 of "
                         f"r = trainer_logprobs - inference_logprobs on {int(bad.sum())} of "
                         f"{int(ok.sum())} tokens: the columns are not aligned as prime-rl "
                         f"writes them")


def rows(dump: Dump, file: int, batch_rows: int) -> Iterator:
    """The file's token rows, about ``batch_rows`` at a time."""
    return record_batches(prime_rl_rows(dump.path), dump, file, batch_rows)


READER = Reader(NAME, "prime-rl token exports (enable_token_export)",
                (".jsonl",), PATTERNS, find, sniff, check, rows, required=PRIME_RL_KEYS,
                ratio="importance_ratio")
