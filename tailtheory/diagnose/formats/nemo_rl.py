"""NeMo-RL's training-data logs, read as token rows of the generic format
(:mod:`tailtheory.diagnose.formats.records` for the sign convention).

**NeMo-RL** (``NVIDIA-NeMo/RL``; schema: ``nemo_rl/algorithms/grpo.py``, the "Log training data"
block of ``grpo_train`` / ``async_grpo_train``, ``nemo_rl/utils/logger.py``
``Logger.log_batched_dict_as_jsonl``, ``nemo_rl/models/policy/workers/dtensor_policy_worker.py``
``get_logprobs`` for the alignment). ``LOG_DIR/train_data_step{N}.jsonl``, ``N`` the 1-based
step, one JSON line per sample; every value is wrapped in a one-element list (the writer slices
a batch of one), which is unwrapped here. Per line: ``token_ids`` (prompt and response, the whole
conversation, right-padded), ``token_loss_mask`` (1 on tokens the policy generated), per-token
``generation_logprobs`` (the engine's: vLLM's, 0 off the generated tokens) and ``prev_logprobs``
(the trainer's forward at the weights that generated, before the update; index ``t`` holds the
log-prob of token ``t``, index 0 is 0), per-token ``advantages``, scalar ``rewards`` and
``sample_loss_mask``, and ``idx`` (the line). Rows: the tokens with ``token_loss_mask`` 1;
``position`` counts from the first of them (the turns between a conversation's responses keep
their place). Written by NeMo-RL >= 0.6.0; earlier files have no ``token_ids`` /
``token_loss_mask`` and are refused. All ``prev_logprobs`` 0 means the trainer skipped its
recomputation (``loss_fn.force_on_policy_ratio``) and is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

from tailtheory.diagnose.formats.base import Dump, first_found
from tailtheory.diagnose.formats.records import (check_first_line, first_keys, float_array,
                                                 int_array, lines, record_batches, same_length,
                                                 scalar, to_generic)
from tailtheory.diagnose.formats.registry import Reader

NAME = "nemo-rl"
TO_GENERIC = {"step": "step", "idx": "sample_id", "token_ids": "token_id",
              "prev_logprobs": "logp_train", "generation_logprobs": "logp_rollout",
              "advantages": "advantage", "rewards": "reward"}
"""NeMo-RL key -> generic name; ``step`` is the ``N`` of ``train_data_step{N}.jsonl`` and
``position`` counts from the first response token."""
NEMO_RL_NAME = re.compile(r"^train_data_step(\d+)\.jsonl$")
"""NeMo-RL's per-step file name; the number is the 1-based step."""
NEMO_RL_KEYS = ("token_ids", "token_loss_mask", "generation_logprobs", "prev_logprobs")
"""Keys of a NeMo-RL line this reader needs."""
PATTERNS = ("train_data_step*.jsonl",)
"""Its files in a folder (the run's log folder)."""


def find(folder: Path) -> list[Path]:
    """``folder/train_data_step*.jsonl``, in step order."""
    return first_found(folder, PATTERNS)


def sniff(path: Path) -> bool:
    """A ``train_data_step{N}.jsonl``, or a first line with both log-prob keys."""
    return bool(NEMO_RL_NAME.match(path.name)) or \
        {"generation_logprobs", "prev_logprobs"} <= first_keys(path)


def check(path: Path) -> Dump:
    """A JSON lines file whose first line has :data:`NEMO_RL_KEYS`; ``ValueError`` naming what
    it lacks (and why NeMo-RL leaves it out) otherwise. A file not named
    ``train_data_step{N}.jsonl`` lacks its step (read as 0); no file logs a ratio."""
    return check_first_line(path, NAME, NEMO_RL_KEYS, _nemo_hint,
                            step=bool(NEMO_RL_NAME.match(path.name)))


def _nemo_hint(missing) -> str:
    if {"token_ids", "token_loss_mask"} & set(missing) and not (
            {"generation_logprobs", "prev_logprobs"} & set(missing)):
        return (" (written by NeMo-RL before 0.6.0, which does not mark the response tokens: "
                "rerun with NeMo-RL >= 0.6.0)")
    if {"generation_logprobs", "prev_logprobs"} & set(missing):
        return (" (only GRPO / PPO runs write both log-probs; distillation runs do not)")
    return ""


def _per_token(v):
    """NeMo-RL wraps a sample's list in a one-element list: ``[[...]]`` -> ``[...]``."""
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    return v


def nemo_rl_rows(path: Path) -> Iterator[dict]:
    """One dict of generic arrays per sample of a NeMo-RL ``train_data_step*.jsonl`` (its
    response tokens: ``token_loss_mask`` 1)."""
    m = NEMO_RL_NAME.match(path.name)
    step = int(m.group(1)) if m else 0
    for i, rec in lines(path):
        where = f"line {i}"
        missing = [k for k in NEMO_RL_KEYS if k not in rec]
        if missing:
            raise ValueError(f"{path} {where}: lacks {', '.join(missing)}{_nemo_hint(missing)}")
        per = {k: _per_token(rec[k]) for k in NEMO_RL_KEYS}
        adv = _per_token(rec.get("advantages"))
        arr = {k: (int_array if k == "token_ids" else float_array)(per[k], path, where, k)
               for k in NEMO_RL_KEYS}
        if isinstance(adv, list):
            arr["advantages"] = float_array(adv, path, where, "advantages")
        same_length(arr, path, where)
        keep = np.flatnonzero(arr["token_loss_mask"] != 0)
        if len(keep) == 0:
            continue
        prev = arr["prev_logprobs"][keep]
        if len(keep) > 1 and np.all(prev == 0) and np.any(arr["generation_logprobs"][keep] != 0):
            raise ValueError(f"{path} {where}: prev_logprobs are 0 on every response token: "
                             f"NeMo-RL skipped the trainer's recomputation "
                             f"(loss_fn.force_on_policy_ratio); rerun without it")
        src = {k: v[keep] for k, v in arr.items() if k != "token_loss_mask"}
        if "advantages" not in arr and adv is not None:
            src["advantages"] = float(scalar(adv))
        reward = scalar(rec.get("rewards"))
        src.update(step=step, idx=scalar(rec.get("idx", i - 1)),
                   rewards=None if reward is None else float(reward), position=keep - keep[0])
        yield to_generic(TO_GENERIC, src, len(keep))


def rows(dump: Dump, file: int, batch_rows: int) -> Iterator:
    """The file's token rows, about ``batch_rows`` at a time."""
    return record_batches(nemo_rl_rows(dump.path), dump, file, batch_rows)


READER = Reader(NAME, "NeMo-RL >= 0.6.0 GRPO / PPO training-data logs",
                (".jsonl",), PATTERNS, find, sniff, check, rows, required=NEMO_RL_KEYS)
