"""Dumps that RL frameworks write themselves, read as token rows of the generic format.

Each reader keeps the response tokens the framework trained on, takes the framework's own names
for them, and renames them once through the framework's map in :mod:`tailtheory.diagnose.read`
(:data:`FRAMEWORK_TO_GENERIC`, beside ``read.ENGINE_TO_GENERIC``). Sign
convention everywhere: ``logp_train`` is the trainer's recomputed log-prob of the sampled token,
``logp_rollout`` the inference engine's, so ``log rho = logp_train - logp_rollout`` and DVP's
``Delta = logp_rollout - logp_train``.

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
the alignment); no reward is exported.

**slime / Miles**: :mod:`tailtheory.diagnose.slime`.

Memory: JSON lines are read a line at a time and emitted in batches of about ``batch_rows``
token rows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

FRAMEWORK_TO_GENERIC = {
    "nemo-rl": {"step": "step", "idx": "sample_id", "token_ids": "token_id",
                "prev_logprobs": "logp_train", "generation_logprobs": "logp_rollout",
                "advantages": "advantage", "rewards": "reward"},
    "prime-rl": {"step": "step", "export_sequence_idx": "sample_id", "token_ids": "token_id",
                 "trainer_logprobs": "logp_train", "inference_logprobs": "logp_rollout",
                 "advantages": "advantage"},
    "slime": {"rollout_id": "step", "sample_index": "sample_id", "tokens": "token_id",
              "log_probs": "logp_train", "rollout_log_probs": "logp_rollout",
              "advantages": "advantage", "local_raw_reward": "reward"},
}
"""Framework key -> generic name, per framework (:mod:`tailtheory.diagnose.frameworks`).
``logp_train`` is always the trainer's recomputed log-prob of the sampled token and
``logp_rollout`` the inference engine's (``log_rho = logp_train - logp_rollout``). ``position``
is derived (from the first response token); NeMo-RL's ``step`` is the ``N`` of
``train_data_step{N}.jsonl``; slime's ``local_raw_reward`` falls back to ``rewards``; prime-rl
exports no reward."""

FRAMEWORKS = ("nemo-rl", "prime-rl", "slime")
"""Framework dumps read here."""
NEMO_RL_NAME = re.compile(r"^train_data_step(\d+)\.jsonl$")
"""NeMo-RL's per-step file name; the number is the 1-based step."""
NEMO_RL_KEYS = ("token_ids", "token_loss_mask", "generation_logprobs", "prev_logprobs")
"""Keys of a NeMo-RL line this reader needs."""
PRIME_RL_KEYS = ("step", "token_ids", "loss_mask", "inference_logprobs", "trainer_logprobs")
"""Keys of a prime-rl token export line this reader needs."""
SLIME_KEYS = ("tokens", "response_lengths", "loss_masks", "rollout_log_probs", "log_probs")
"""Per-sample keys of a slime / Miles train dump this reader needs."""
MISMATCH_KL_TOL = (1e-4, 1e-2)
"""prime-rl's ``mismatch_kl`` must equal ``exp(r) - r - 1`` of the exported log-probs within
``atol + rtol * |mismatch_kl|`` (float32 rounding); more than ``MISMATCH_KL_BAD`` of the tokens
outside it means the columns are not aligned as documented."""
MISMATCH_KL_BAD = 0.01


def sniff(path: Path) -> str | None:
    """The framework whose dump ``path`` is, from its name and first record, or None (then the
    generic / engine reader decides). Raises ``ValueError`` on an unreadable first record."""
    suffix = path.suffix.lower()
    if suffix == ".pt":
        return "slime"
    if suffix != ".jsonl":
        return None
    if NEMO_RL_NAME.match(path.name):
        return "nemo-rl"
    if re.fullmatch(r"rank_\d+\.jsonl", path.name) and re.fullmatch(r"step_\d+", path.parent.name):
        return "prime-rl"
    from tailtheory.diagnose.columns import jsonl_records

    first = next(jsonl_records(path, 1), None)
    keys = set(first[0]) if first else set()
    if {"generation_logprobs", "prev_logprobs"} <= keys:
        return "nemo-rl"
    if {"inference_logprobs", "trainer_logprobs"} <= keys:
        return "prime-rl"
    return None


def check(path: Path, kind: str) -> None:
    """Check that ``path`` holds a ``kind`` (NeMo-RL or prime-rl) dump with the keys its reader
    needs in its first record. Raises ``ValueError``. (A slime file is checked by loading it:
    :func:`tailtheory.diagnose.slime.slime_samples`.)"""
    if path.suffix.lower() != ".jsonl":
        raise ValueError(f"{path}: a {kind} dump is a .jsonl file, got {path.suffix!r}")
    from tailtheory.diagnose.columns import jsonl_records

    first = next(jsonl_records(path, 1), None)
    if first is None:
        raise ValueError(f"{path}: the dump has no rows")
    need = NEMO_RL_KEYS if kind == "nemo-rl" else PRIME_RL_KEYS
    missing = [k for k in need if k not in first[0]]
    if missing:
        raise ValueError(f"{path}: not a {kind} dump: line 1 lacks {', '.join(missing)}"
                         f"{_nemo_hint(missing) if kind == 'nemo-rl' else ''}")


def _nemo_hint(missing) -> str:
    if {"token_ids", "token_loss_mask"} & set(missing) and not (
            {"generation_logprobs", "prev_logprobs"} & set(missing)):
        return (" (written by NeMo-RL before 0.6.0, which does not mark the response tokens: "
                "rerun with NeMo-RL >= 0.6.0)")
    if {"generation_logprobs", "prev_logprobs"} & set(missing):
        return (" (only GRPO / PPO runs write both log-probs; distillation runs do not)")
    return ""


def to_generic(kind: str, src: dict, n: int) -> dict:
    """One response's arrays under ``kind``'s names -> generic names (``FRAMEWORK_TO_GENERIC``);
    scalars are repeated over its ``n`` rows."""

    out = {"position": np.asarray(src["position"])}
    for name, generic in FRAMEWORK_TO_GENERIC[kind].items():
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


def _same_length(arrays: dict, path, where) -> int:
    lens = {k: len(v) for k, v in arrays.items()}
    if len(set(lens.values())) > 1:
        raise ValueError(f"{path} {where}: per-token lists of different lengths "
                         f"({', '.join(f'{k} {n}' for k, n in lens.items())}); they must align")
    return next(iter(lens.values()))


def _scalar(v):
    while isinstance(v, list) and len(v) == 1:
        v = v[0]
    return v


def _per_token(v):
    """NeMo-RL wraps a sample's list in a one-element list: ``[[...]]`` -> ``[...]``."""
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    return v


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    from tailtheory.diagnose.columns import jsonl_records

    for i, recs in enumerate(jsonl_records(path, 1), 1):
        yield i, recs[0]


def nemo_rl_rows(path: Path) -> Iterator[dict]:
    """One dict of generic arrays per sample of a NeMo-RL ``train_data_step*.jsonl`` (its
    response tokens: ``token_loss_mask`` 1)."""
    m = NEMO_RL_NAME.match(path.name)
    step = int(m.group(1)) if m else 0
    for i, rec in _lines(path):
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
        _same_length(arr, path, where)
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
            src["advantages"] = float(_scalar(adv))
        reward = _scalar(rec.get("rewards"))
        src.update(step=step, idx=_scalar(rec.get("idx", i - 1)),
                   rewards=None if reward is None else float(reward), position=keep - keep[0])
        yield to_generic("nemo-rl", src, len(keep))


def prime_rl_rows(path: Path) -> Iterator[dict]:
    """One dict of generic arrays per sequence of a prime-rl token export (its ``loss_mask``
    tokens the policy sampled), its ``mismatch_kl`` checked against the log-probs."""
    for i, rec in _lines(path):
        where = f"line {i}"
        missing = [k for k in PRIME_RL_KEYS if k not in rec]
        if missing:
            raise ValueError(f"{path} {where}: lacks {', '.join(missing)} (not a prime-rl "
                             f"token export line)")
        arr = {k: (int_array if k == "token_ids" else float_array)(rec[k], path, where, k)
               for k in PRIME_RL_KEYS if k != "step"}
        for k in ("advantages", "mismatch_kl", "rl_weights", "ref_kl_weights"):
            if isinstance(rec.get(k), list) and any(x is not None for x in rec[k]):
                arr[k] = float_array(rec[k], path, where, k)
        _same_length(arr, path, where)
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
                                         "advantages") if k in arr}
        first = np.flatnonzero(loss)[0]
        src.update(step=int(int_array([rec["step"]], path, where, "step")[0]),
                   export_sequence_idx=rec.get("export_sequence_idx", i - 1),
                   position=keep - first)
        yield to_generic("prime-rl", src, len(keep))


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
