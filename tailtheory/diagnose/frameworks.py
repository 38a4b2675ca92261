"""Dumps that RL frameworks write themselves, read as token rows of the generic format.

Each reader keeps the response tokens the framework trained on, takes the framework's own names
for them, and renames them once through the framework's map in :mod:`tailtheory.diagnose.read`
(:data:`~tailtheory.diagnose.read.FRAMEWORK_TO_GENERIC`, beside ``ENGINE_TO_GENERIC``). Sign
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

**slime / Miles** (``THUDM/slime``: ``slime/observability/train_data_utils.py``
``_build_dump_payload`` (``format_version`` 2), ``slime/utils/arguments.py`` for the paths,
``slime/ray/rollout.py`` ``_convert_samples_to_train_data`` for the fields;
``radixark/miles``: ``miles/utils/train_dump_utils.py``, ``miles/dashboard/dump_reader.py``).
``--dump-details DIR`` writes ``DIR/train_data/{rollout_id}.pt`` (slime; one file per rollout)
or ``DIR/train_data/{rollout_id}_{rank}.pt`` (Miles, earlier slime; one file per rank). A
``format_version`` 2 file holds ``rollout_id`` and ``samples``, one dict per sample; an
earlier / Miles file holds ``rollout_id``, ``rank``, ``cp_size`` and ``rollout_data``, a dict of
per-sample lists. Per sample: ``tokens`` (prompt and response), ``response_lengths``,
``loss_masks`` (response length; 0 on tool output), ``rollout_log_probs`` (SGLang's) and
``log_probs`` (the actor's recomputation, or the training forward's own when slime reuses it)
over the response, ``advantages``, ``rewards`` (group-normalised when slime normalises rewards),
``local_raw_reward`` (the raw reward, newer slime) and ``sample_index`` / ``sample_indices``.
Rows: response tokens with ``loss_masks`` 1; ``position`` is the index in the response. A
sample written by several ranks (tensor-parallel copies) is read once; a file without
``log_probs`` (not the last pipeline stage) or with context-parallel slices is refused.

Safety: a ``.pt`` file is loaded only with ``torch.load(weights_only=True, map_location="cpu")``,
with numpy arrays allowed; a file that needs any other pickled object is refused, never run.

Memory: JSON lines are read a line at a time and emitted in batches of about ``batch_rows``
token rows; a ``.pt`` file is one pickled dict and is loaded whole (the largest file must fit in
memory), then emitted in batches.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Iterator

import numpy as np

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
    from tailtheory.diagnose.read import _jsonl_records

    first = next(_jsonl_records(path, 1), None)
    keys = set(first[0]) if first else set()
    if {"generation_logprobs", "prev_logprobs"} <= keys:
        return "nemo-rl"
    if {"inference_logprobs", "trainer_logprobs"} <= keys:
        return "prime-rl"
    return None


def check(path: Path, kind: str) -> None:
    """Check that ``path`` holds a ``kind`` dump with the keys its reader needs (the first
    record of JSON lines; the whole ``.pt``, which is loaded). Raises ``ValueError``."""
    if kind == "slime":
        _slime_samples(path)
        return
    if path.suffix.lower() != ".jsonl":
        raise ValueError(f"{path}: a {kind} dump is a .jsonl file, got {path.suffix!r}")
    from tailtheory.diagnose.read import _jsonl_records

    first = next(_jsonl_records(path, 1), None)
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


def tables(path: Path, kind: str, batch_rows: int, seen: set | None = None) -> Iterator:
    """Token rows of one framework dump as arrow tables in the generic names, about
    ``batch_rows`` rows each (a response is never split). ``seen``, shared by the slime files
    of one run, skips a sample that another rank's file already gave."""
    parts = (_slime_rows(path, seen) if kind == "slime" else
             {"nemo-rl": _nemo_rl_rows, "prime-rl": _prime_rl_rows}[kind](path))
    buf: list[dict] = []
    n = 0
    for part in parts:
        buf.append(part)
        n += len(part["logp_train"])
        if n >= batch_rows:
            yield _table(buf)
            buf, n = [], 0
    if buf:
        yield _table(buf)


def _table(parts: list[dict]):
    import pyarrow as pa

    names = [k for k in parts[0] if all(k in p for p in parts)]
    cols = {}
    for k in names:
        vals = [np.asarray(p[k]) for p in parts]
        if vals[0].dtype == object:
            cols[k] = pa.array(np.concatenate(vals).tolist())
        else:
            cols[k] = pa.array(np.concatenate(vals))
    return pa.table(cols)


def _generic(kind: str, src: dict, n: int) -> dict:
    """One response's arrays under ``kind``'s names -> generic names (``FRAMEWORK_TO_GENERIC``);
    scalars are repeated over its ``n`` rows."""
    from tailtheory.diagnose.read import FRAMEWORK_TO_GENERIC

    out = {"position": np.asarray(src["position"])}
    for name, generic in FRAMEWORK_TO_GENERIC[kind].items():
        if name in src and src[name] is not None:
            v = src[name]
            out[generic] = np.full(n, v, dtype=object if isinstance(v, str) else None) \
                if np.ndim(v) == 0 else np.asarray(v)
    return out


def _floats(v, path, where, key) -> np.ndarray:
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{path} {where}: {key} must hold numbers") from None
    if a.ndim != 1:
        raise ValueError(f"{path} {where}: {key} must be a list of numbers (one per token), "
                         f"got shape {a.shape}")
    return a


def _ints(v, path, where, key) -> np.ndarray:
    a = _floats(v, path, where, key)
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
    from tailtheory.diagnose.read import _jsonl_records

    for i, recs in enumerate(_jsonl_records(path, 1), 1):
        yield i, recs[0]


def _nemo_rl_rows(path: Path) -> Iterator[dict]:
    m = NEMO_RL_NAME.match(path.name)
    step = int(m.group(1)) if m else 0
    for i, rec in _lines(path):
        where = f"line {i}"
        missing = [k for k in NEMO_RL_KEYS if k not in rec]
        if missing:
            raise ValueError(f"{path} {where}: lacks {', '.join(missing)}{_nemo_hint(missing)}")
        per = {k: _per_token(rec[k]) for k in NEMO_RL_KEYS}
        adv = _per_token(rec.get("advantages"))
        arr = {"token_ids": _ints(per["token_ids"], path, where, "token_ids"),
               "token_loss_mask": _floats(per["token_loss_mask"], path, where, "token_loss_mask"),
               "generation_logprobs": _floats(per["generation_logprobs"], path, where,
                                              "generation_logprobs"),
               "prev_logprobs": _floats(per["prev_logprobs"], path, where, "prev_logprobs")}
        if isinstance(adv, list):
            arr["advantages"] = _floats(adv, path, where, "advantages")
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
        yield _generic("nemo-rl", src, len(keep))


def _prime_rl_rows(path: Path) -> Iterator[dict]:
    for i, rec in _lines(path):
        where = f"line {i}"
        missing = [k for k in PRIME_RL_KEYS if k not in rec]
        if missing:
            raise ValueError(f"{path} {where}: lacks {', '.join(missing)} (not a prime-rl "
                             f"token export line)")
        arr = {"token_ids": _ints(rec["token_ids"], path, where, "token_ids"),
               "loss_mask": _floats(rec["loss_mask"], path, where, "loss_mask"),
               "inference_logprobs": _floats(rec["inference_logprobs"], path, where,
                                             "inference_logprobs"),
               "trainer_logprobs": _floats(rec["trainer_logprobs"], path, where,
                                           "trainer_logprobs")}
        for k in ("advantages", "mismatch_kl", "rl_weights", "ref_kl_weights"):
            if isinstance(rec.get(k), list) and any(x is not None for x in rec[k]):
                arr[k] = _floats(rec[k], path, where, k)
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
        src.update(step=int(_ints([rec["step"]], path, where, "step")[0]),
                   export_sequence_idx=rec.get("export_sequence_idx", i - 1),
                   position=keep - first)
        yield _generic("prime-rl", src, len(keep))


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


def load_pt(path: Path):
    """A ``.pt`` file loaded without running code: ``torch.load(weights_only=True,
    map_location="cpu")``, numpy arrays allowed. Raises ``ValueError`` for a file that needs
    any other pickled object, or that is not a torch file."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        what = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        raise ValueError(f"{path}: refused: it holds a pickled object "
                         f"{'(' + what.group(1) + ') ' if what else ''}that only a full unpickle "
                         f"could build, and unpickling can run code; save the dump with tensors, "
                         f"numbers, strings, lists and dicts only") from None
    except Exception as exc:  # RuntimeError, EOFError, zipfile errors: not a torch file
        raise ValueError(f"{path}: not a readable torch .pt file "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None


def _numpy_globals() -> list:
    """What rebuilding plain numpy arrays and scalars needs (data, no code)."""
    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    dtypes = [type(np.dtype(t)) for t in ("b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                                           "f2", "f4", "f8")]
    return [_reconstruct, scalar, np.ndarray, np.dtype, *dtypes]


def _slime_samples(path: Path) -> tuple[int, list[dict]]:
    """``(rollout_id, samples)`` of a slime / Miles train dump: ``format_version`` 2 as is, an
    earlier / Miles file transposed from its per-sample lists."""
    obj = load_pt(path)
    if not isinstance(obj, dict) or not ("samples" in obj or "rollout_data" in obj):
        keys = ", ".join(map(str, list(obj)[:8])) if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"{path}: not a slime / Miles train dump (expected the keys samples or "
                         f"rollout_data of --dump-details DIR/train_data/*.pt; found {keys})")
    rid = obj.get("rollout_id", 0)
    if "samples" in obj:
        samples = obj["samples"]
        if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
            raise ValueError(f"{path}: samples must be a list of dicts")
        raw = obj.get("raw_reward")
        for s in samples:
            if "local_raw_reward" not in s and raw is not None and s.get("rollout_position") \
                    is not None and int(s["rollout_position"]) < len(raw):
                s["local_raw_reward"] = raw[int(s["rollout_position"])]
    else:
        data = obj["rollout_data"]
        if int(obj.get("cp_size", 1) or 1) > 1:
            raise ValueError(f"{path}: written with context parallelism (cp_size "
                             f"{obj['cp_size']}): its per-token fields are slices of each "
                             f"response; rerun the dump with context parallel size 1")
        if not isinstance(data, dict) or "response_lengths" not in data:
            raise ValueError(f"{path}: rollout_data lacks response_lengths (not a slime / Miles "
                             f"train dump)")
        if "log_probs" not in data:
            raise ValueError(f"{path}: no log_probs: this rank is not on the last pipeline "
                             f"stage, which computes them; pass the last stage's files")
        n = len(data["response_lengths"])
        cols = {k: v for k, v in data.items() if isinstance(v, (list, tuple)) and len(v) == n
                or (hasattr(v, "shape") and len(getattr(v, "shape", ())) >= 1 and len(v) == n)}
        samples = [{k: v[i] for k, v in cols.items()} for i in range(n)]
        for i, s in enumerate(samples):
            s["sample_index"] = s.get("sample_indices", s.get("partition", i))
    return int(_scalar_of(rid)), samples


def _scalar_of(v):
    return v.item() if hasattr(v, "item") else v


def _slime_rows(path: Path, seen: set | None = None) -> Iterator[dict]:
    rid, samples = _slime_samples(path)
    for i, s in enumerate(samples):
        where = f"sample {i}"
        missing = [k for k in SLIME_KEYS if s.get(k) is None]
        if missing:
            hint = {"log_probs": " (the trainer's log-probs: written on the last pipeline stage)",
                    "rollout_log_probs": " (the rollout did not return log-probs)"}
            raise ValueError(f"{path} {where}: lacks {', '.join(missing)}"
                             f"{''.join(hint.get(k, '') for k in missing)}")
        sid = _scalar_of(s.get("sample_index"))
        sid = i if sid is None else sid
        resp = int(_scalar_of(s["response_lengths"]))
        tokens = _ints(_np(s["tokens"]).reshape(-1), path, where, "tokens")
        if seen is not None:
            key = (rid, sid, hashlib.blake2b(tokens.tobytes(), digest_size=16).digest())
            if key in seen:
                continue                                 # a tensor-parallel copy
            seen.add(key)
        arr = {"loss_masks": _floats(_np(s["loss_masks"]).reshape(-1), path, where, "loss_masks"),
               "rollout_log_probs": _floats(_np(s["rollout_log_probs"]).reshape(-1), path, where,
                                            "rollout_log_probs"),
               "log_probs": _floats(_np(s["log_probs"]).reshape(-1), path, where, "log_probs")}
        if s.get("advantages") is not None:
            arr["advantages"] = _floats(_np(s["advantages"]).reshape(-1), path, where,
                                        "advantages")
        for k, v in arr.items():
            if len(v) != resp:
                raise ValueError(f"{path} {where}: {k} has {len(v)} entries but the response "
                                 f"has {resp} tokens (context-parallel slices, or not a slime "
                                 f"train dump)")
        if len(tokens) < resp:
            raise ValueError(f"{path} {where}: {len(tokens)} tokens but a response of {resp}")
        keep = np.flatnonzero(arr.pop("loss_masks") != 0)
        if len(keep) == 0:
            continue
        src = {k: v[keep] for k, v in arr.items()}
        reward = s.get("local_raw_reward", s.get("rewards"))
        src.update(tokens=tokens[len(tokens) - resp:][keep], rollout_id=rid, sample_index=sid,
                   local_raw_reward=None if reward is None else float(_scalar_of(reward)),
                   position=keep)
        yield _generic("slime", src, len(keep))


def _np(v) -> np.ndarray:
    if hasattr(v, "detach"):
        return v.detach().to("cpu").double().numpy() if v.is_floating_point() \
            else v.detach().to("cpu").numpy()
    return np.asarray(v)


__all__ = ["FRAMEWORKS", "sniff", "check", "tables", "load_pt"]
