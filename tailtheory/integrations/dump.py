"""Per-token dumps in ``tailtheory diagnose``'s generic format, written from framework batches.

Framework-free: the TRL hook (:mod:`tailtheory.integrations.trl_dump`) and the verl hook
(:mod:`tailtheory.integrations.verl_dump`) turn their framework's batch into padded ``(B, T)``
tensors and call :func:`sequence_records` and :class:`JsonlDump`. The format is the one
:mod:`tailtheory.diagnose.formats.generic` documents (``docs/diagnose.md``, "The generic
format"), in its *sequence rows* shape: one JSON object per response, with ``sample_id``,
``step`` (and ``reward`` when known) as scalars and ``position``, ``token_id``, ``logp_train``,
``logp_rollout`` (and ``advantage``) as lists of one length, holding only the tokens the mask
keeps.

A non-finite log-prob (vLLM's unscorable tokens are NaN in TRL's batch) is written as JSON
``null``, which the reader takes as NaN and excludes (counted, never averaged in).
Shapes: ``B`` responses, ``T`` response tokens (right-padded).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

FIELDS = ("sample_id", "step", "position", "token_id", "logp_train", "logp_rollout")
"""Keys of every record (``advantage`` and ``reward`` are added when given)."""


def _finite_or_none(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def _scalar(v: float) -> float | None:
    return v if math.isfinite(v) else None


def sequence_records(token_ids: torch.Tensor, logp_train: torch.Tensor,
                     logp_rollout: torch.Tensor, mask: torch.Tensor, *, step: int,
                     sample_ids: list, advantages: torch.Tensor | None = None,
                     rewards: torch.Tensor | None = None) -> list[dict]:
    """One generic-format record per response (row) of the ``(B, T)`` tensors.

    ``mask`` (B, T) marks the sampled response tokens (padding, prompt and tool-output tokens
    are 0); ``position`` is the token's index in its response. ``advantages`` is ``(B,)`` (one
    per response) or ``(B, T)`` (per token); ``rewards`` is ``(B,)``. ``sample_ids`` holds ``B``
    ids, unique within the file and step. A response with no kept token gives no record.
    Non-finite values are written as ``null``. Raises ``ValueError`` when the shapes disagree.
    """
    shape = tuple(token_ids.shape)
    if len(shape) != 2 or any(tuple(x.shape) != shape for x in (logp_train, logp_rollout, mask)):
        got = [tuple(x.shape) for x in (token_ids, logp_train, logp_rollout, mask)]
        raise ValueError(f"token_ids, logp_train, logp_rollout and mask must share one (B, T) "
                         f"shape; got {got}")
    if len(sample_ids) != shape[0]:
        raise ValueError(f"sample_ids has {len(sample_ids)} ids for {shape[0]} responses")
    keep = mask.detach().bool().cpu()
    tok = token_ids.detach().long().cpu()
    lt, lr = (x.detach().double().cpu() for x in (logp_train, logp_rollout))
    adv = None if advantages is None else advantages.detach().double().cpu()
    if adv is not None and tuple(adv.shape) not in {shape, shape[:1]}:
        raise ValueError(f"advantages must be (B,) or (B, T) = {shape}; got {tuple(adv.shape)}")
    rew = None if rewards is None else rewards.detach().double().cpu().reshape(-1)
    if rew is not None and len(rew) != shape[0]:
        raise ValueError(f"rewards must hold one value per response ({shape[0]}); got {len(rew)}")
    out = []
    for i in range(shape[0]):
        m = keep[i]
        if not m.any():
            continue
        rec = {"sample_id": sample_ids[i], "step": int(step),
               "position": torch.nonzero(m).flatten().tolist(),
               "token_id": tok[i][m].tolist(),
               "logp_train": _finite_or_none(lt[i][m].tolist()),
               "logp_rollout": _finite_or_none(lr[i][m].tolist())}
        if adv is not None:
            rec["advantage"] = (_scalar(float(adv[i])) if adv.dim() == 1
                                else _finite_or_none(adv[i][m].tolist()))
        if rew is not None:
            rec["reward"] = _scalar(float(rew[i]))
        out.append(rec)
    return out


class JsonlDump:
    """An append-only JSON-lines dump file, created with its folder.

    ``path`` must not exist yet unless ``append`` is true (so two runs never mix in one file;
    pass ``append=True`` when resuming a run). :meth:`write` appends records and flushes, so a
    crash loses at most the batch being written.
    """

    def __init__(self, path: str | Path, append: bool = False):
        self.path = Path(path)
        if self.path.exists() and not append:
            raise FileExistsError(f"{self.path} exists: delete it, choose another dump folder, "
                                  f"or pass append=True to add to it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def write(self, records: list[dict]) -> int:
        """Append ``records`` (one JSON object per line); returns how many were written."""
        with self.path.open("a", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, allow_nan=False) + "\n")
        return len(records)


__all__ = ["sequence_records", "JsonlDump", "FIELDS"]
