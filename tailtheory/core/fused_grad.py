"""Tiles of the fused LM head, the safe set on a tile, and the backward of the log-prob.

Source: DVP (Li et al., arXiv 2512.23087) for the safe set ``S`` and the pruned log-prob (P1,
P3); LOPTI (Yang et al., arXiv 2505.12929) for ``d log pi(k) / dz = e_k - pi`` (S1).

The forward passes live in :mod:`tailtheory.core.fused`; this module holds what both directions
need: the tile sizes (:func:`check_tiles`), one tile of logits ``z = (h W^T + b) / tau``
(:class:`Head`), the safe set on that tile (:class:`SafeSet`), and :func:`logp_backward`, which
recomputes every tile once more and turns it into ``g (e_k - pi_S) / tau`` before two matrix
products fold it into ``dh`` and ``dW``.

Shapes: ``N`` valid positions (the ``B * T`` positions a mask keeps), ``H`` hidden, ``V``
vocabulary; a tile is ``(n, v)`` with ``n <= token_tile``, ``v <= vocab_tile``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from tailtheory.core.checks import check_positive_int


EXP_FLOOR = {torch.float32: -43.0, torch.float64: -354.0}
"""``z - m`` is raised to this floor before ``exp``: ``e^floor`` and its square stay normal
numbers (float32: ``e^-43 ~ 2e-19``, squared ``4e-38``). Subnormal results make this CPU's
``exp`` ~100x and a multiply ~15x slower (measured), and real logits at a low temperature reach
them. The change to any sum of ``V`` terms is at most ``V e^floor`` against a largest term of 1
(V = 152k: ``3e-14`` relative in float32, whose resolution is ``6e-8``; nothing in float64)."""
BIG = 2.0**100
"""Added with a minus sign to the logits outside ``S`` so that a row's max is taken over ``S``
without a bool mask (bool tensors are 5-10x slower than arithmetic here)."""
TOKEN_TILE = 256
"""Positions per tile when ``token_tile`` is None."""
VOCAB_TILE = 2048
"""Vocabulary entries per tile when ``vocab_tile`` is None and torch runs one CPU thread (capped
at V). With :data:`TOKEN_TILE` a tile is 512K logits, 2 MiB in float32: one core's L2 on the
benchmark's CPU, so the elementwise passes after the product read it from cache (8192 columns
were 1.25x slower there; ``benchmarks/bench_fused.py``)."""
VOCAB_TILE_THREADED = 32_768
"""The same with several torch threads, or off the CPU. Every elementwise pass over a tile is one
parallel region that ends in a barrier, and on a busy machine a barrier waits for a thread that
was descheduled: larger tiles mean fewer of them. With 2 threads on a busy 2-core machine
(V = 152k, N = 128) 2048 columns were 4-5x TRL's time, 16,384 1.1-1.4x, 32,768 0.84-0.95x."""


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64; every other dtype (bf16, fp16, fp32) accumulates in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def at_least(d: torch.Tensor, thr: float) -> torch.Tensor:
    """``1.0`` where ``d >= thr`` (``thr`` rounded to ``d``'s dtype, as ``d >= thr`` rounds it),
    else ``0.0``, in ``d``'s dtype, overwriting ``d``: ``sign(d - t') `` clamped at 0, with
    ``t'`` the number just below ``thr``, so ``d > t'`` exactly when ``d >= thr``."""
    t = torch.tensor(thr, dtype=d.dtype)
    below = float(torch.nextafter(t, torch.tensor(-math.inf, dtype=d.dtype)))
    return d.sub_(below).sign_().clamp_(min=0.0)


def default_vocab_tile(device: torch.device) -> int:
    """:data:`VOCAB_TILE` on a CPU with one torch thread, else :data:`VOCAB_TILE_THREADED`."""
    one = device.type == "cpu" and torch.get_num_threads() == 1
    return VOCAB_TILE if one else VOCAB_TILE_THREADED


def check_tiles(token_tile: Any, vocab_tile: Any, V: int,
                device: torch.device) -> tuple[int, int]:
    """``(token_tile, vocab_tile)``: the ones given (positive ints, ``vocab_tile <= V``), or the
    defaults (:data:`TOKEN_TILE`; :func:`default_vocab_tile` capped at ``V``)."""
    tt = TOKEN_TILE if token_tile is None else check_positive_int(token_tile, "token_tile")
    vt = (min(default_vocab_tile(device), V) if vocab_tile is None
          else check_positive_int(vocab_tile, "vocab_tile"))
    if vt > V:
        raise ValueError(f"vocab_tile={vt} is larger than the vocabulary V={V}; use at most V")
    return tt, vt


def tiles(n: int, step: int):
    """Slices of ``step`` covering ``range(n)``; the last one may be shorter."""
    for i in range(0, n, step):
        yield slice(i, min(n, i + step))


@dataclass
class Head:
    """One side's LM head on its valid positions: ``h (N, H)`` in the compute dtype (converted
    once: it is small next to the logits), ``W (V, H)`` and ``b (V,)`` in their own dtype
    (converted one vocabulary tile at a time)."""

    h: torch.Tensor
    W: torch.Tensor
    b: torch.Tensor | None
    tau: float

    def weight(self, cols: slice) -> torch.Tensor:
        """``W[cols]`` in the compute dtype, ``(v, H)``."""
        return self.W[cols].to(self.h.dtype)

    def logits(self, rows: slice, cols: slice, Wc: torch.Tensor | None = None) -> torch.Tensor:
        """``(h[rows] W[cols]^T + b[cols]) / tau`` in the compute dtype: one ``(n, v)`` tile."""
        Wc = self.weight(cols) if Wc is None else Wc
        if self.b is None:
            z = self.h[rows] @ Wc.T
        else:
            z = torch.addmm(self.b[cols].to(Wc.dtype), self.h[rows], Wc.T)
        return z.div_(self.tau) if self.tau != 1.0 else z


@dataclass
class SafeSet:
    """DVP's kept vocabulary ``S`` on one tile; ``None`` everywhere when nothing is pruned.

    ``kind``: ``None`` (keep all), ``"keep"`` (an explicit ``(B*T, V)`` mask, read at the valid
    positions ``pos``), ``"min_p"`` (``z_v - max z >= log rho``), ``"absolute"``
    (``z_v - LSE(z) >= log tau``) or ``"top_p"`` (``z_v > c`` or ``z_v == c`` and ``v <= i_c``:
    the prefix of the order (``z`` descending, id ascending) that ``safe_vocab_mask`` keeps).
    ``z`` are the rule side's logits (``side``: ``"roll"`` or ``"train"``). ``r1``/``r2`` hold
    the rule's per-row scalars (max, LSE, or ``c`` and ``i_c``), filled by the forward's first
    pass. The threshold is compared in log space (``log 0 = -inf`` keeps every token).
    The sampled token is always in ``S``, as in ``tailtheory.core.safeset.dvp_keep``.
    """

    kind: str | None = None
    threshold: float = 0.0
    keep: torch.Tensor | None = None
    pos: torch.Tensor | None = None
    side: str = "train"
    r1: torch.Tensor | None = None
    r2: torch.Tensor | None = None

    @property
    def log_thr(self) -> float:
        return math.log(self.threshold) if self.threshold > 0 else -math.inf

    def select(self, rows: slice, cols: slice, z_rule: torch.Tensor | None, k: torch.Tensor,
               dt: torch.dtype) -> torch.Tensor | None:
        """``1[v in S]`` on the tile, ``(n, v)`` in the compute dtype ``dt``; ``None`` when every
        token is kept. ``z_rule`` is the rule side's tile, ``k (n,)`` the rows' sampled tokens.
        """
        if self.kind is None:
            return None
        if self.kind == "keep":
            ind = self.keep[self.pos[rows], cols].to(dt)
        elif self.kind in ("min_p", "absolute"):  # z - max >= log rho; z - LSE >= log tau
            ind = at_least(z_rule - self.r1[rows, None], self.log_thr)
        else:
            ids = torch.arange(cols.start, cols.stop, device=z_rule.device)
            c = self.r1[rows, None]
            ind = ((z_rule > c) | ((z_rule == c) & (ids <= self.r2[rows, None]))).to(dt)
        local = k - cols.start
        inside = (local >= 0) & (local < cols.stop - cols.start)
        if inside.any():
            r = inside.nonzero()[:, 0]
            ind[r, local[r]] = 1.0
        return ind


def logp_backward(train: Head, roll: Head | None, safe: SafeSet, k: torch.Tensor,
                  norm: tuple[torch.Tensor, torch.Tensor], g: torch.Tensor, token_tile: int,
                  vocab_tile: int,
                  needs: tuple[bool, bool, bool]):
    """``(dh, dW, db)`` of ``sum_i g_i logp_i``, recomputing every tile of logits once.

    Source: LOPTI (S1), DVP (P3). ``d logp_i / dz_v = (1[v = k_i] - pi_S(v)) / tau`` on ``S``,
    0 outside it, with ``pi_S(v) = exp((z_v - m) - log s)`` from the forward's ``norm = (m,
    log s)`` (``LSE_S = m + log s``, kept apart: see :func:`tailtheory.core.fused._main_pass`); then
    ``dh = G W``, ``dW = G^T h``, ``db = sum_i G_i``. Vocabulary tiles outside, token tiles
    inside, so ``dW`` of a vocabulary tile is complete (float32 or float64) before it is stored
    in ``W``'s dtype; ``dh`` accumulates in the compute dtype. ``needs``: which of ``dh, dW, db``.

    Shapes: m, log s, g, k (N,) -> dh (N, H) compute dtype, dW (V, H), db (V,) or None each.
    """
    N, V = train.h.shape[0], train.W.shape[0]
    dt = train.h.dtype
    dh = torch.zeros_like(train.h) if needs[0] else None
    dW = torch.empty_like(train.W) if needs[1] else None
    db = torch.empty(V, dtype=train.b.dtype, device=train.b.device) if needs[2] else None
    gt = g.to(dt) / train.tau
    for cols in tiles(V, vocab_tile):
        Wc = train.weight(cols)
        acc_W = torch.zeros_like(Wc) if needs[1] else None
        acc_b = torch.zeros(Wc.shape[0], dtype=dt, device=Wc.device) if needs[2] else None
        for rows in tiles(N, token_tile):
            G = _tile_grad(train, roll, safe, k, norm, gt, rows, cols, Wc)      # (n, v)
            if dh is not None:
                dh[rows].addmm_(G, Wc)
            if acc_W is not None:
                acc_W.addmm_(G.T, train.h[rows])
            if acc_b is not None:
                acc_b += G.sum(0)
        if dW is not None:
            dW[cols] = acc_W
        if db is not None:
            db[cols] = acc_b
    return dh, dW, db


def _tile_grad(train, roll, safe, k, norm, gt, rows, cols, Wc) -> torch.Tensor:
    """``gt_i (1[v = k_i] - pi_S(v))`` on one tile (``gt = g / tau``), 0 outside ``S``."""
    z = train.logits(rows, cols, Wc)
    z_rule = None
    if safe.kind in ("min_p", "absolute", "top_p"):
        z_rule = roll.logits(rows, cols) if safe.side == "roll" else z
    ind = safe.select(rows, cols, z_rule, k[rows], z.dtype)
    m, log_s = norm
    G = z.sub_(m[rows, None]).sub_(log_s[rows, None])                  # log pi_S, <= 0 on S
    G = G.clamp_(EXP_FLOOR[G.dtype], 0.0).exp_()                        # pi_S on S
    if ind is not None:
        G.mul_(ind)
    G.mul_(-gt[rows, None])
    local = k[rows] - cols.start
    inside = (local >= 0) & (local < cols.stop - cols.start)
    if inside.any():
        r = inside.nonzero()[:, 0]
        G[r, local[r]] += gt[rows][r]
    return G


__all__ = ["EXP_FLOOR", "BIG", "compute_dtype", "at_least", "tiles", "Head", "SafeSet",
           "logp_backward"]
