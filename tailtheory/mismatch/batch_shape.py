"""Batch-shape mismatch: the same sequences scored alone and inside padded batches.

An inference engine batches requests as they come, so a sequence's log-probs are computed in
batches of varying size and padding; the trainer scores it in another batch. Kernels pick their
blocking, hence their reduction order, by shape, so the same token may get another log-prob.
Users of RL frameworks have measured this mismatch in bf16 as the share of tokens whose
probability ratio leaves ``[0.9, 1.1]`` (``RATIO_BAND``) and disagree on whether it falls or grows
with model size; Qi et al. (arXiv 2510.26788) report that fp16 removes most of what bf16 creates.

:func:`batch_shape_mismatch` scores each sequence alone (batch 1, no padding: the reference) and
in consecutive groups of ``b`` left-padded sequences, per dtype and decoder, and compares every
token's log-prob ``Delta = log p_batch - log p_alone`` (:func:`shape_stats`):

- ``outside``: the share of tokens with ``exp(Delta)`` outside :data:`RATIO_BAND`;
- ``over_1e3``: the share with ``|Delta| > 1e-3``;
- ``equal``: the share bitwise equal (``Delta == 0``);
- ``k3``: the mean of ``exp(Delta) - 1 - Delta`` (``tailtheory.core.estimators.k3``), and the
  largest ``|Delta|``.

Decoders: ``hf`` (the model's own forward; in 16 bits the cast copy of
``tailtheory.engine.rollout.copies.inference_copy``) and ``fast`` (the engine's own forward,
:class:`~tailtheory.engine.rollout.fast.InferenceEngine`, its 16-bit GEMMs accumulating in
float32). On a CPU the float32 differences may be last-bit only: that is a finding, not a
failure. Shapes: ``N`` sequences of lengths ``n_i``; per sequence ``n_i - 1`` scored tokens.

Claim V8 (ours; criterion in the ledger): the mismatch against model size, on the rungs of the
ladder (:func:`tailtheory.ladder.mismatch.measure_batch_shape`, ``tailtheory ladder batch-shape``).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.estimators import k3
from tailtheory.core.forward import full_forward, left_pad
from tailtheory.engine.rollout.copies import inference_copy
from tailtheory.engine.rollout.fast import InferenceEngine

BATCHES = (1, 8, 32)
"""Batch sizes the sequences are scored in; 1 (alone, no padding) is the reference."""

DTYPES = ("float32", "bf16", "fp16")
DECODERS = ("hf", "fast")

RATIO_BAND = (0.9, 1.1)
"""The probability-ratio band whose leavers the frameworks' reports count."""


def _scorer(model, dtype: str, decoder: str):
    """``f(ids (B, P), attn (B, P)) -> logits (B, P, V)`` float32 of ``model`` in ``dtype``."""
    if decoder == "fast":
        engine = InferenceEngine(model, dtype)
        return lambda ids, attn: engine.full_logits(ids, attn).float()
    infer = model if dtype == "float32" else inference_copy(model, dtype)
    return lambda ids, attn: full_forward(infer, ids, attn).float()


@torch.no_grad()
def shape_logprobs(model, seqs: list[list[int]], batch: int, dtype: str = "float32",
          decoder: str = "hf", pad_id: int = 0) -> list[torch.Tensor]:
    """Each sequence's token log-probs ``log p(x_t | x_<t)``, ``t = 1 .. n - 1``, scored in
    consecutive groups of ``batch`` sequences left-padded with ``pad_id`` (masked). -> a list of
    ``(n_i - 1,)`` float32 tensors."""
    check_positive_int(batch, "batch")
    if dtype not in DTYPES or decoder not in DECODERS:
        raise ValueError(f"dtype must be one of {DTYPES} and decoder one of {DECODERS}, got "
                         f"{dtype!r}, {decoder!r}")
    if any(len(s) < 2 for s in seqs):
        raise ValueError("every sequence needs at least 2 tokens (one to predict)")
    run, V, out = _scorer(model, dtype, decoder), model.config.vocab_size, []
    dev = next(model.parameters()).device
    for i in range(0, len(seqs), batch):
        group = seqs[i:i + batch]
        ids, attn, lens = left_pad(group, pad_id, V)
        ids, attn = ids.to(dev), attn.to(dev)
        lp = torch.log_softmax(run(ids, attn), -1)                       # (B, P, V)
        P = ids.shape[1]
        for r, n in enumerate(lens.tolist()):
            cols = torch.arange(P - n, P - 1, device=dev)                # predicts P-n+1 .. P-1
            out.append(lp[r, cols, ids[r, cols + 1]].cpu())
    return out


def shape_stats(delta: torch.Tensor) -> dict:
    """The measures of the module docstring from ``delta`` (1-D, every scored token)."""
    d = delta.double()
    ratio = d.exp()
    low, high = RATIO_BAND
    return {"tokens": int(d.numel()),
            "outside": float(((ratio < low) | (ratio > high)).double().mean()),
            "over_1e3": float((d.abs() > 1e-3).double().mean()),
            "equal": float((d == 0).double().mean()),
            "k3": float(k3(d).mean()), "max_abs": float(d.abs().max())}


def batch_shape_mismatch(model, seqs: list[list[int]], batches=BATCHES, dtypes=DTYPES,
                         decoders=DECODERS, pad_id: int = 0) -> list[dict]:
    """One row per decoder, dtype and batch size above 1: :func:`shape_stats` of each token's
    log-prob in that batch against the sequence scored alone, same decoder and dtype."""
    rows = []
    for decoder in decoders:
        for dtype in dtypes:
            alone = torch.cat(shape_logprobs(model, seqs, 1, dtype, decoder, pad_id))
            for b in batches:
                if b == 1:
                    continue
                delta = torch.cat(shape_logprobs(model, seqs, b, dtype, decoder, pad_id)) - alone
                rows.append({"decoder": decoder, "dtype": dtype, "batch": b,
                             **shape_stats(delta)})
    return rows


def ragged_windows(stream: torch.Tensor, n: int, min_len: int, max_len: int,
                   seed: int = 0) -> list[list[int]]:
    """``n`` windows of a token ``stream`` (1-D), lengths uniform in ``[min_len, max_len]``,
    at seeded random offsets: sequences whose batches need padding."""
    check_positive_int(n, "n")
    if not 2 <= min_len <= max_len < stream.numel():
        raise ValueError(f"need 2 <= min_len <= max_len < the stream's {stream.numel()} tokens, "
                         f"got {min_len}, {max_len}")
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(min_len, max_len + 1, (n,), generator=g)
    starts = [int(torch.randint(0, stream.numel() - int(L), (1,), generator=g)) for L in lens]
    return [stream[s:s + int(L)].tolist() for s, L in zip(starts, lens)]
