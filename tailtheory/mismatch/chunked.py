"""M7's real mismatch on any checkpoint, one chunk of positions at a time (TIM; DVP's (1-p) law).

Source: TIM (Zhong et al., arXiv 2605.14220) for the real mismatch sources; DVP (Li et al., arXiv
2512.23087) for the envelope (M2, M3). The paths, signs and tables are those of
:mod:`tailtheory.mismatch.real`; what changes is the memory.

:func:`tailtheory.mismatch.real.paired_logits` returns both sides' logits as float64 ``(B, T,
V)`` tensors: 5 GB each at 8 x 512 positions and Qwen's V = 151,936. Here each side runs its
forward once up to the last hidden states ``(B, T, H)`` (on the model's device), and the LM
head turns them into float32 logits one chunk of :func:`chunk_rows` positions at a time
(:func:`paired_logit_chunks`); every statistic is folded in per chunk in float64
(:func:`envelope_from_chunks`), so the extra memory is a few ``(chunk, V)`` tensors.

- trainer: ``hidden_forward`` of the float32 model, then its ``lm_head``;
- ``bf16`` / ``fp16`` / ``fp8``: the same on the inference copy of
  :func:`tailtheory.engine.rollout.copies.inference_copy`, whose head computes in its own dtype;
- ``kv``: the float32 backbone decoding one token at a time through the Hugging Face KV cache
  (as ``real.kv_decode``), its hidden states through the float32 head.

What is equal (STYLE rule 20): the statistics of :func:`envelope_from_chunks` equal
:func:`~tailtheory.mismatch.real.mismatch_envelope`'s on the same logits up to the order of
float64 sums (tested at 1e-12). The chunked logits equal :func:`paired_logits`'s to the
rounding of the head's product on a chunk rather than the whole batch: float32 rounding on the
trainer and ``kv`` sides, one rounding of the copy's dtype on the 16-bit ones (a GEMM's row
may round differently when the row count changes); ``tests/mismatch/test_chunked.py`` states
the tolerances.

Shapes: input_ids (B, T); chunks of N = B T flattened positions: z_train, z_infer (n, V).
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.forward import hidden_forward, lm_head
from tailtheory.engine.rollout.copies import FP8_SCALING
from tailtheory.engine.rollout.copies import check_trainer, inference_copy
from tailtheory.mismatch.real import (BOUND_ATOL, BOUND_RTOL, HEAD_P, PATHS, TAIL_P,
                                      _check_input_ids, kv_decode, mismatch_tokens)

CHUNK_ELEMENTS = 2**20
"""Logits per chunk of statistics: ``max(1, CHUNK_ELEMENTS // V)`` positions (V = 151,936: 6
positions, 8 MiB a float64 tensor; the statistics hold about fifteen such tensors at once)."""

HEAD_CHUNKS = 4
"""The LM heads run on ``HEAD_CHUNKS`` chunks at a time (16 MiB of float32 logits a side): a
big model's head weight is read once per block rather than once per chunk."""

POINT_HEAD_P = 1e-2
"""Tokens above this trainer probability are all kept for the figure (as
``tailtheory.mismatch.figures.POINT_HEAD_P``); others are a uniform random sample."""


class NonFiniteLogits(ValueError):
    """An inference path gave NaN or infinite logits (fp16 overflows on some real models)."""


def chunk_rows(V: int) -> int:
    """Positions per chunk at vocabulary ``V``."""
    return max(1, CHUNK_ELEMENTS // V)


def _kv_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """The backbone decoding one token at a time with the KV cache. -> (B, T, H)."""
    return kv_decode(model.get_decoder(), ids, "last_hidden_state")


def _sides(model, ids: torch.Tensor, path: str, scaling: str):
    """``((h_train, head_train), (h_infer, head_infer))``: hidden states ``(N, H)`` and the
    ``nn.Module`` head that turns them into logits, for each side."""

    lm_head(model)                        # refuses logits that are not h W^T + b (softcapping)
    head = model.get_output_embeddings()
    h = hidden_forward(model, ids)
    flat = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731  (B, T, H) -> (N, H)
    if path == "kv":
        return (flat(h), head), (flat(_kv_hidden(model, ids)), head)
    copy = inference_copy(model, path, scaling)
    return (flat(h), head), (flat(hidden_forward(copy, ids)), copy.get_output_embeddings())


@torch.no_grad()
def paired_logit_chunks(model, input_ids, path: str = "bf16", scaling: str = FP8_SCALING,
                        rows: int | None = None) -> Iterator[tuple[slice, torch.Tensor,
                                                                   torch.Tensor]]:
    """Trainer and inference logits of the same tokens, a chunk of positions at a time.

    Source: TIM (M7), as :func:`tailtheory.mismatch.real.paired_logits` (module docstring for
    what is equal). ``input_ids`` go to ``model``'s device; ``rows``: positions per chunk
    (default :func:`chunk_rows`; the heads run on :data:`HEAD_CHUNKS` chunks at a time). An
    inference block with NaN or infinite logits raises :class:`NonFiniteLogits`.

    Shapes: input_ids (B, T) -> yields (positions slice of the B T flattened positions,
    z_train (n, V) float32, z_infer (n, V) float32), on the model's device.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    check_trainer(model)
    dev = next(model.parameters()).device
    ids = _check_input_ids(input_ids, model.config.vocab_size).to(dev)
    model.eval()
    (h, head), (hi, head_i) = _sides(model, ids, path, scaling)
    n = check_positive_int(rows, "rows") if rows else chunk_rows(model.config.vocab_size)
    yield from head_chunks((h, head), (hi, head_i), n, path)


def head_chunks(train: tuple, infer: tuple, rows: int,
                path: str) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor]]:
    """Both sides' LM heads on their hidden states, ``rows`` positions a chunk (the heads run on
    :data:`HEAD_CHUNKS` chunks at a time): the loop of :func:`paired_logit_chunks`, for any two
    sides. ``train``, ``infer``: ``(hidden (N, H), head)``, the head an ``nn.Module`` giving
    logits in its own dtype; an inference block with NaN or infinite logits raises
    :class:`NonFiniteLogits` naming ``path``.

    Shapes: hidden (N, H) each -> yields (positions slice of the N, z_train (n, V) float32,
    z_infer (n, V) float32).
    """
    (h, head), (hi, head_i) = train, infer
    N = h.shape[0]
    for b0 in range(0, N, HEAD_CHUNKS * rows):
        b = slice(b0, min(N, b0 + HEAD_CHUNKS * rows))
        z, zi = head(h[b]).float(), head_i(hi[b]).float()              # (m, V) each
        if not torch.isfinite(zi.sum()):
            raise NonFiniteLogits(f"the {path} path gives non-finite logits (an overflow of "
                                  f"its dtype) at positions {b.start}..{b.stop - 1}")
        for r0 in range(b.start, b.stop, rows):
            r = slice(r0, min(b.stop, r0 + rows))
            yield r, z[r0 - b0:r.stop - b0], zi[r0 - b0:r.stop - b0]


def chunk_tokens(z: torch.Tensor, zi: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`~tailtheory.mismatch.real.mismatch_tokens` (per-position ``eps``) of one chunk of
    finite logits, in float64 with fewer temporaries: the same formulas (``mismatch_bound``'s
    ``log1p`` form of the exact bound; its ``logaddexp`` form, beyond ``eps`` ~ 355, falls back
    to ``mismatch_tokens`` itself), ``eps`` kept per position ``(n,)``.

    Shapes: z, zi (n, V) -> dict: p, abs_Delta, bound_exact, bound_first, bound_linear (n, V);
    eps (n,).
    """
    z, zi = z.double(), zi.double()
    d = zi - z
    eps = (d.amax(-1) - d.amin(-1)) / 2                               # (n,)
    e2 = torch.expm1(2 * eps)[:, None]                                 # (n, 1)
    if not torch.isfinite(e2).all():
        tok = mismatch_tokens(z[None], zi[None], "position")
        return {**{k: v[0] for k, v in tok.items() if k != "eps"}, "eps": eps}
    lp = torch.log_softmax(z, -1)
    D = torch.log_softmax(zi, -1).sub_(lp).abs_()                      # |Delta|
    p = lp.exp_()
    q = 1 - p
    first = q * e2                                   # mismatch_bound's where(q > 0, ...): e2 finite
    return dict(p=p, abs_Delta=D, eps=eps, bound_exact=torch.log1p(first), bound_first=first,
                bound_linear=q.mul_(2 * eps[:, None]))


class _Sums:
    """Running sums of :func:`mismatch_envelope`'s summary over chunks."""

    def __init__(self):
        self.n = 0
        self.s = dict(abs=0.0, head=0.0, tail=0.0, eps=0.0)
        self.c = dict(head=0, tail=0, exact=0, first=0, linear=0)
        self.max_abs = self.max_ratio = 0.0

    def add(self, tok: dict) -> None:
        p, D, exact = tok["p"], tok["abs_Delta"], tok["bound_exact"]
        head, mid = p > HEAD_P, p >= TAIL_P                  # both sparse: index, never mask
        total, n_mid = float(D.sum()), int(torch.count_nonzero(mid))
        self.n += D.numel()
        self.s["abs"] += total
        self.s["head"] += float(D[head].sum())
        self.s["tail"] += total - float(D[mid].sum())
        self.s["eps"] += float(tok["eps"].sum()) * D.shape[-1]        # eps of every token
        self.c["head"] += int(torch.count_nonzero(head))
        self.c["tail"] += D.numel() - n_mid
        buf = torch.empty_like(D)
        for k, b in (("exact", exact), ("first", tok["bound_first"]),
                     ("linear", tok["bound_linear"])):
            torch.mul(b, 1 + BOUND_RTOL, out=buf).add_(BOUND_ATOL)
            self.c[k] += int(torch.count_nonzero(torch.le(D, buf)))
        self.max_abs = max(self.max_abs, float(D.max()))
        # D / exact where exact > 0, else 0 (exact = 0 gives 0/0 or x/0: nan or inf)
        torch.div(D, exact, out=buf).nan_to_num_(nan=0.0, posinf=0.0)
        self.max_ratio = max(self.max_ratio, float(buf.max()))

    def summary(self) -> dict:
        n, c, s = self.n, self.c, self.s
        mean = lambda k: s[k] / c[k] if c[k] else math.nan  # noqa: E731
        return dict(n_tokens=n, mean_abs=s["abs"] / n, max_abs=self.max_abs,
                    head_mean_abs=mean("head"), tail_mean_abs=mean("tail"),
                    frac_head=c["head"] / n, frac_tail=c["tail"] / n, mean_eps=s["eps"] / n,
                    frac_under_exact=c["exact"] / n, frac_under_first=c["first"] / n,
                    frac_under_linear=c["linear"] / n, max_ratio_exact=self.max_ratio)


POINT_COLUMNS = ("p", "abs_Delta", "eps", "bound_exact", "bound_first")
"""The columns of :func:`envelope_from_chunks`'s points (those of the notebook's figure)."""


def envelope_from_chunks(chunks: Iterable, n_positions: int, V: int, max_points: int = 5_000,
                         seed: int = 0):
    """:func:`~tailtheory.mismatch.real.mismatch_envelope`'s summary and the figure's points,
    folded in chunk by chunk.

    Source: TIM (M7), DVP (M2, M3). ``chunks`` yields ``(positions, z_train, z_infer)`` as
    :func:`paired_logit_chunks` does, covering ``n_positions`` positions in order. The summary
    has the keys and meaning of ``mismatch_envelope``'s (per-position ``eps``). The points are
    every token with trainer ``p > POINT_HEAD_P``, in order, then the others among
    ``max_points`` flat indices drawn uniformly by ``seed`` (the figure's sample: a random
    subset of the tail, as ``figures.plot_mismatch_vs_p`` draws; not the same subset).

    Shapes: chunks of (n, V) -> (dict, DataFrame with columns position, token and
    :data:`POINT_COLUMNS`).
    """
    import pandas as pd

    check_positive_int(n_positions, "n_positions")
    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, n_positions * V, (max_points,), generator=g).unique()  # sorted
    sums, head, rest = _Sums(), [], []
    for r, z, zi in chunks:
        tok = chunk_tokens(z, zi)                                      # (n, V) each
        sums.add(tok)
        hit = (tok["p"] > POINT_HEAD_P).nonzero()                      # (k, 2)
        head.append(_rows(tok, hit, r.start))
        lo, hi = r.start * V, r.stop * V
        local = picks[(picks >= lo) & (picks < hi)] - lo
        at = torch.stack([local // V, local % V], 1).to(tok["p"].device)
        keep = tok["p"][at[:, 0], at[:, 1]] <= POINT_HEAD_P
        rest.append(_rows(tok, at[keep], r.start))
    cols = ("position", "token", *POINT_COLUMNS)
    return sums.summary(), pd.DataFrame({c: [x for part in head + rest for x in part[c]]
                                         for c in cols})


def _rows(tok: dict, at: torch.Tensor, r0: int) -> dict[str, list]:
    """The points at ``at (k, 2)`` (chunk row, token) of a chunk's token table, as lists: no
    small tensor outlives its chunk (held between large temporaries, small blocks keep the
    allocator from returning their memory: the resident set would grow with every chunk)."""
    i, j = at[:, 0], at[:, 1]
    cols = {"position": (i + r0).tolist(), "token": j.tolist()}
    cols.update({k: tok[k][i, j].tolist() for k in POINT_COLUMNS if k != "eps"})
    cols["eps"] = tok["eps"][i].tolist()
    return cols


def mismatch_probe(model, input_ids, paths=("bf16", "fp16", "kv"), max_points: int = 5_000,
                   seed: int = 0):
    """M7 on ``model`` and ``input_ids`` on every path: ``(summary, points)``.

    Source: TIM (M7), DVP (M3). ``summary``: one row per path (``path``, ``note`` and the keys
    of :func:`envelope_from_chunks`); a path whose logits overflow its dtype gets a ``note``
    and no numbers. ``points``: the figure's table (``label`` = path, then
    :data:`POINT_COLUMNS`), for :func:`tailtheory.mismatch.figures.plot_mismatch_points`.
    Shapes: input_ids (B, T) -> (DataFrame, DataFrame).
    """
    import pandas as pd

    B, T = torch.as_tensor(input_ids).shape
    rows, frames = [], []
    for path in paths:
        try:
            s, pts = envelope_from_chunks(paired_logit_chunks(model, input_ids, path), B * T,
                                          model.config.vocab_size, max_points, seed)
        except NonFiniteLogits as exc:
            rows.append({"path": path, "note": str(exc)})
            continue
        rows.append({"path": path, "note": "", **s})
        frames.append(pts.assign(label=path))
    points = (pd.concat(frames, ignore_index=True) if frames
              else pd.DataFrame(columns=["label", "position", "token", *POINT_COLUMNS]))
    return pd.DataFrame(rows), points[["label", *POINT_COLUMNS]]


__all__ = ["CHUNK_ELEMENTS", "POINT_HEAD_P", "POINT_COLUMNS", "NonFiniteLogits", "chunk_rows",
           "paired_logit_chunks", "head_chunks", "chunk_tokens", "envelope_from_chunks",
           "mismatch_probe"]
