"""slime / Miles' ``--dump-details`` files, read as token rows of the generic format
(:mod:`tailtheory.diagnose.formats.records` for the sign convention).

Source: (``THUDM/slime``: ``slime/observability/train_data_utils.py``
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

Memory: a ``.pt`` file is one pickled dict and is loaded whole (the largest file must fit in
memory), then emitted in batches.
"""

from __future__ import annotations

import hashlib
import pickle
import re
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from tailtheory.diagnose.formats.base import Dump, first_found
from tailtheory.diagnose.formats.records import (float_array, int_array, record_batches,
                                                 to_generic)
from tailtheory.diagnose.formats.registry import Reader

NAME = "slime"
TO_GENERIC = {"rollout_id": "step", "sample_index": "sample_id", "tokens": "token_id",
              "log_probs": "logp_train", "rollout_log_probs": "logp_rollout",
              "advantages": "advantage", "local_raw_reward": "reward"}
"""slime key -> generic name; ``local_raw_reward`` falls back to ``rewards``; ``position`` is
the index in the response."""
SLIME_KEYS = ("tokens", "response_lengths", "loss_masks", "rollout_log_probs", "log_probs")
"""Per-sample keys of a slime / Miles train dump this reader needs."""
PATTERNS = ("train_data/*.pt", "*.pt")
"""Its files in the ``--dump-details`` folder, or in its ``train_data`` folder."""


def find(folder: Path) -> list[Path]:
    """``folder/train_data/*.pt``, else ``folder/*.pt``, in rollout and rank order."""
    return first_found(folder, PATTERNS)


def check(path: Path) -> Dump:
    """A slime / Miles train dump, loaded and checked whole (:func:`slime_samples`); its
    precision is the first sample's ``log_probs`` dtype; slime logs no importance ratio."""
    _, samples = slime_samples(path)
    first = next((s["log_probs"] for s in samples if s.get("log_probs") is not None), None)
    return Dump(path, "pt", NAME, None, (), precision=_stored(first), lacks=("logged_ratio",))


def _stored(v) -> str:
    """How a sample's log-probs are stored: a tensor's or an array's dtype, else Python floats."""
    dtype = getattr(v, "dtype", None)
    if dtype is None:
        return "Python floats as stored"
    return f"{str(dtype).removeprefix('torch.')} as stored"


def load_pt(path: Path):
    """A ``.pt`` file loaded without running code: ``torch.load(weights_only=True,
    map_location="cpu")``, numpy arrays allowed. Raises ``ValueError`` for a file that needs
    any other pickled object, or that is not a torch file."""
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


def slime_samples(path: Path) -> tuple[int, list[dict]]:
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


def slime_rows(path: Path, seen: set | None = None) -> Iterator[dict]:
    """One dict of generic arrays per sample of a slime / Miles train dump (its ``loss_masks``
    tokens); a sample already in ``seen`` (another rank's copy) is skipped."""
    rid, samples = slime_samples(path)
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
        tokens = int_array(_np(s["tokens"]).reshape(-1), path, where, "tokens")
        if seen is not None:
            key = (rid, sid, hashlib.blake2b(tokens.tobytes(), digest_size=16).digest())
            if key in seen:
                continue                                 # a tensor-parallel copy
            seen.add(key)
        keys = ["loss_masks", "rollout_log_probs", "log_probs"]
        keys += ["advantages"] * (s.get("advantages") is not None)
        arr = {k: float_array(_np(s[k]).reshape(-1), path, where, k) for k in keys}
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
        yield to_generic(TO_GENERIC, src, len(keep))


def _np(v) -> np.ndarray:
    if hasattr(v, "detach"):
        return v.detach().to("cpu").double().numpy() if v.is_floating_point() \
            else v.detach().to("cpu").numpy()
    return np.asarray(v)


def rows(dump: Dump, file: int, batch_rows: int) -> Iterator:
    """The file's token rows, about ``batch_rows`` at a time; the samples already read from the
    run's other files (``dump.seen``) are skipped."""
    return record_batches(slime_rows(dump.path, dump.seen), dump, file, batch_rows)


READER = Reader(NAME, "slime / Miles train dumps (--dump-details)", (".pt",), PATTERNS,
                find, lambda path: True, check, rows, required=SLIME_KEYS)
