"""Per-token statistics straight from hidden states and the LM head: a fused LM head.

Source: DVP (Li et al., arXiv 2512.23087) for the safe set and the pruned log-prob and mass (P1,
P3); OTB (Li et al., arXiv 2602.07078) for ``sum_j p_j^2`` (S2, S3); TRM (Li et al., arXiv
2512.23075) for the token KL ``KL(pi_roll || pi_train)`` (T12); LOPTI (Yang et al., arXiv
2505.12929) for the gradient ``e_k - pi`` (S1).

:func:`tailtheory.core.stats.token_stats` needs the logits ``(B, T, V)``. Here the logits
``z = (h W^T + b) / tau`` are only ever formed one ``(token_tile, vocab_tile)`` tile at a time,
and every statistic is folded in online (running max ``m``, ``s = sum_v e^(z_v - m)``, rescaled
by ``e^(m_old - m_new)`` when the max grows):

    logp        = z_k - LSE_S(z)                      LSE_S = m + log s, over the safe set S
    entropy     = log s - sum_S e^(z - m) (z - m) / s
    sum_p2      = sum_S e^(2(z - m)) / s^2            log_sum_p2 = log of it (OTB's energy)
    kl          = sum_S q (z^roll - z) - LSE_S(z^roll) + LSE_S(z),   q = softmax_S(z^roll)
    pruned_mass = sum_{v not in S} softmax(z)_v       (full-vocabulary softmax)

``S`` is every token, an explicit ``keep`` mask, or DVP's rule (``min_p``, ``top_p``,
``absolute`` of ``tailtheory.core.safeset``) on the rollout side's logits when given, else on
this side's (as ``tailtheory.core.safeset.dvp_keep``: the sampled token is always kept).
``min_p`` and ``absolute`` cost one more pass over the rule side's tiles (its max, its LSE);
``top_p`` sorts whole rows, one token tile of at most :data:`TOP_P_ELEMENTS` logits at a time.
``logp`` is differentiable in ``h``, ``W`` and ``b``; its backward recomputes the tiles
(:func:`tailtheory.core.fused_grad.logp_backward`). Only positions where ``mask`` is true are
computed; the others are 0 in every output.

Numerics: ``logp`` is ``(z_k - m) - log s``, never ``z_k - LSE`` (see :func:`_main_pass`);
``z - m`` is floored at ``EXP_FLOOR`` before ``exp`` (a change far below the compute dtype's
resolution that keeps subnormal numbers, 100x slower here, out of the sums); ``S`` enters as a
0/1 factor and a ``-BIG`` penalty on the tile, not as a bool mask (5-10x slower on a CPU).

:func:`naive_fused_token_stats` is the reference: ``h W^T + b`` in full, then
``naive_token_stats``. Shapes: B sequences, T positions, H hidden, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from tailtheory.core.checks import as_tensor, check_finite, check_mask
from tailtheory.core.fused_grad import (BIG, EXP_FLOOR, Head, SafeSet, check_tiles,
                                        compute_dtype, logp_backward, tiles)
from tailtheory.core.safeset import RHO_DEFAULT, check_rule, dvp_keep, safe_vocab_mask
from tailtheory.core.stats import naive_token_stats

TOP_P_ELEMENTS = 2**22
"""``top_p`` sorts whole rows of the rule side, one token tile at a time, so its token tile is
capped at ``max(1, TOP_P_ELEMENTS // V)`` rows (16 MiB of float32 logits; V = 152k: 27 rows),
as ``tailtheory.core.stats.CHUNK_ELEMENTS``. The cap holds in every pass: the cut found on the
sorted rows is compared with the main pass's tiles, which must be bitwise the same numbers (a
product of other shape may round differently)."""
FUSED_STATS = ("logp", "entropy", "sum_p2", "log_sum_p2", "kl", "pruned_mass")
"""Keys :func:`fused_token_stats` may return (``kl`` with a rollout side, ``pruned_mass`` with a
safe set)."""


class _Online:
    """Online softmax sums of one distribution over vocabulary tiles (rows ``(N,)``)."""

    def __init__(self, N: int, dt: torch.dtype, dev, moments: bool = False,
                 out: bool = False):
        self.m = torch.full((N,), -math.inf, dtype=dt, device=dev)
        self.s = torch.zeros(N, dtype=dt, device=dev)
        z = (lambda on: torch.zeros(N, dtype=dt, device=dev) if on else None)
        self.a, self.s2, self.o = z(moments), z(moments), z(out)

    def add(self, rows: slice, z: torch.Tensor, ind: torch.Tensor | None = None,
            pen: torch.Tensor | None = None, off: torch.Tensor | None = None,
            scratch: bool = False):
        """Fold tile ``z (n, v)`` restricted to ``S`` in: ``ind = 1[v in S]`` and ``pen = -BIG
        1[v not in S]`` (None: every token); ``o`` sums ``e`` weighted by ``off``. Returns
        ``(e, r)``: ``e^(z - m_new)`` on the tile (0 outside ``S``) and the rescale. ``scratch``:
        the caller is done with ``z``, which then holds ``z - m_new`` (one temporary fewer)."""
        m_old = self.m[rows]
        top = (z if pen is None else z + pen).amax(-1)                 # max over S on the tile
        if pen is not None:                                            # no S entry: -inf
            top = torch.where(top > -BIG / 2, top, -math.inf)
        m_new = torch.maximum(m_old, top)
        ref = torch.where(m_new > -math.inf, m_new, 0.0)               # finite shift
        d = m_old - ref                                                # <= 0, -inf at start
        r = d.exp()
        x = z.sub_(ref[:, None]) if scratch else z - ref[:, None]      # (n, v)
        # <= 0 on S; above 0 only outside S (rule on the other side), where ind zeroes e
        x.clamp_(EXP_FLOOR[x.dtype], 0.0)
        e = x.exp()
        if ind is not None:
            e.mul_(ind)
        s_old = self.s[rows].clone()
        self.s[rows] = r * s_old + e.sum(-1)
        if self.a is not None:  # sum e (z - m): shifting m by d adds d s
            shift = torch.where(s_old > 0, d * s_old, 0.0)
            self.a[rows] = r * (self.a[rows] + shift) + torch.linalg.vecdot(e, x)
            self.s2[rows] = r * r * self.s2[rows] + torch.linalg.vecdot(e, e)
        if self.o is not None:
            self.o[rows] = r * self.o[rows] + torch.linalg.vecdot(e, off)
        self.m[rows] = m_new
        return e, r

    def lse(self) -> torch.Tensor:
        return self.m + self.s.log()


def _rule_pass(train: Head, roll: Head | None, safe: SafeSet, token_tile: int,
               vocab_tile: int) -> None:
    """The rule side's per-row scalars: max (min_p), LSE (absolute), top-p's cut ``(c, i_c)``."""
    head = train if safe.side == "train" else roll
    N, V = head.h.shape[0], head.W.shape[0]
    if safe.kind == "top_p":
        c = head.h.new_empty(N)
        i_c = torch.empty(N, dtype=torch.long, device=c.device)
        for rows in tiles(N, token_tile):                              # whole rows: a sort
            zr = torch.cat([head.logits(rows, cols) for cols in tiles(V, vocab_tile)], -1)
            kept = safe_vocab_mask(zr, "top_p", safe.threshold)           # (n, V)
            c[rows] = zr.masked_fill(~kept, math.inf).amin(-1)
            ids = torch.arange(V, device=zr.device).expand_as(zr)
            i_c[rows] = ids.masked_fill(~(kept & (zr == c[rows, None])), -1).amax(-1)
        safe.r1, safe.r2 = c, i_c
        return
    acc = _Online(N, head.h.dtype, head.h.device)
    for cols in tiles(V, vocab_tile):
        Wc = head.weight(cols)
        for rows in tiles(N, token_tile):
            z = head.logits(rows, cols, Wc)
            if safe.kind == "min_p":
                acc.m[rows] = torch.maximum(acc.m[rows], z.amax(-1))
            else:
                acc.add(rows, z, scratch=True)
    if safe.kind == "min_p":
        safe.r1 = acc.m
        return
    safe.r1 = acc.lse()
    low = (acc.m - safe.r1) < safe.log_thr                             # max pi < threshold
    if low.any():
        raise ValueError(f"threshold={safe.threshold:g} exceeds max_a pi(a) in "
                         f"{int(low.sum())} row(s): the absolute rule would remove every token "
                         f"there")


def _main_pass(train: Head, roll: Head | None, safe: SafeSet, k: torch.Tensor,
               token_tile: int, vocab_tile: int) -> tuple[dict, tuple]:
    """Every statistic over ``S`` in one sweep of the tiles; returns ``(stats (N,), (m, log s))``
    (``LSE_S = m + log s``, kept apart for the backward)."""
    N, V = train.h.shape[0], train.W.shape[0]
    dt, dev = train.h.dtype, train.h.device
    pruned = safe.kind is not None
    acc = _Online(N, dt, dev, moments=True)
    accq = _Online(N, dt, dev) if roll is not None else None
    full = _Online(N, dt, dev, out=True) if pruned else None
    bq = torch.zeros(N, dtype=dt, device=dev)
    zk = torch.zeros(N, dtype=dt, device=dev)
    for cols in tiles(V, vocab_tile):
        Wc = train.weight(cols)
        Wr = roll.weight(cols) if roll is not None else None
        for rows in tiles(N, token_tile):
            z = train.logits(rows, cols, Wc)                           # (n, v)
            zr = roll.logits(rows, cols, Wr) if roll is not None else None
            ind = safe.select(rows, cols, zr if safe.side == "roll" else z, k[rows], dt)
            pen = None if ind is None else (ind - 1.0).mul_(BIG)       # -BIG outside S
            local = k[rows] - cols.start
            hit = ((local >= 0) & (local < z.shape[1])).nonzero()[:, 0]
            zk[rows.start + hit] = z[hit, local[hit]]
            if full is not None:
                full.add(rows, z, off=1.0 - ind)
            if accq is not None:
                eq, rq = accq.add(rows, zr, ind, pen)
                bq[rows] = rq * bq[rows] + torch.linalg.vecdot(eq, zr - z)
            acc.add(rows, z, ind, pen, scratch=True)                   # the last use of z
    # log pi(k) = (z_k - m) - log s, never z_k - LSE: rounding LSE first would cost the digits
    # of |m| (float32 at |z| ~ 100: 4e-6 in every log-prob), which log_softmax does not lose
    log_s = acc.s.log()
    out = {"logp": (zk - acc.m) - log_s, "entropy": (log_s - acc.a / acc.s).clamp_min(0.0),
           "sum_p2": acc.s2 / acc.s.square(), "log_sum_p2": acc.s2.log() - 2 * log_s}
    if accq is not None:
        out["kl"] = bq / accq.s - (accq.m - acc.m) - (accq.s.log() - log_s)
    if full is not None:
        out["pruned_mass"] = (full.o / full.s).clamp(max=1.0)
    return out, (acc.m, log_s)


@dataclass
class _Plan:
    """Everything but the differentiable inputs: sampled tokens, rollout side, safe set, tiles."""

    k: torch.Tensor
    roll: Head | None
    safe: SafeSet
    tau: float
    token_tile: int
    vocab_tile: int

    def run(self, train: Head) -> tuple[dict, tuple]:
        if self.safe.kind in ("min_p", "absolute", "top_p"):
            _rule_pass(train, self.roll, self.safe, self.token_tile, self.vocab_tile)
        return _main_pass(train, self.roll, self.safe, self.k, self.token_tile, self.vocab_tile)


class _FusedLogp(torch.autograd.Function):
    """The fused statistics; ``logp`` differentiable in ``h``, ``W``, ``b`` (claim S1)."""

    @staticmethod
    def forward(ctx, h, W, b, plan: _Plan):
        out, (m, log_s) = plan.run(Head(h.to(compute_dtype(h)), W, b, plan.tau))
        ctx.save_for_backward(h, W, b, m, log_s)
        ctx.plan = plan
        rest = [out[n] for n in FUSED_STATS[1:] if n in out]
        ctx.mark_non_differentiable(*rest)
        return (out["logp"], *rest)

    @staticmethod
    def backward(ctx, g_logp, *unused):
        h, W, b, m, log_s = ctx.saved_tensors
        p = ctx.plan
        train = Head(h.to(compute_dtype(h)), W, b, p.tau)
        dh, dW, db = logp_backward(train, p.roll, p.safe, p.k, (m, log_s), g_logp, p.token_tile,
                                   p.vocab_tile, ctx.needs_input_grad[:3])
        return (None if dh is None else dh.to(h.dtype)), dW, db, None


def _check_head(h: Any, W: Any, b: Any, names: tuple[str, str, str]):
    """``h (B, T, H)``, ``W (V, H)``, ``b (V,)`` or None: shapes that fit, finite entries."""
    h, W = as_tensor(h, names[0], dtype=None), as_tensor(W, names[1], dtype=None)
    if h.ndim != 3:
        raise ValueError(f"{names[0]} must have shape (B, T, H); got {tuple(h.shape)}")
    if W.ndim != 2 or W.shape[0] < 1:
        raise ValueError(f"{names[1]} must have shape (V, H) with V >= 1; got {tuple(W.shape)}")
    if W.shape[1] != h.shape[-1]:
        raise ValueError(f"hidden size of {names[0]} ({h.shape[-1]}) does not match the LM head "
                         f"{names[1]} of shape (V, H) = {tuple(W.shape)}")
    if b is not None:
        b = as_tensor(b, names[2], dtype=None)
        if b.shape != W.shape[:1]:
            raise ValueError(f"{names[2]} must have shape (V,) = ({W.shape[0]},); got "
                             f"{tuple(b.shape)}")
    for t, name in ((h, names[0]), (W, names[1]), (b, names[2])):
        if t is not None:
            check_finite(t.detach(), name)
    return h, W, b


def _check_roll(h, W, bias, h_roll, W_roll, bias_roll):
    """The rollout side ``(h_roll, W_roll, bias_roll)`` or None: its hidden states, its head, or
    both; the side not given is this one's (a head given alone brings its own bias)."""
    if h_roll is None and W_roll is None:
        if bias_roll is not None:
            raise ValueError("bias_roll needs W_roll (the rollout side's head); got neither "
                             "h_roll nor W_roll")
        return None
    if W_roll is None:
        if bias_roll is not None:
            raise ValueError("bias_roll needs W_roll; with h_roll alone the rollout side uses "
                             "this side's head W and bias")
        W_roll, bias_roll = W, bias
    if h_roll is None:
        h_roll = h
    return _check_head(h_roll, W_roll, bias_roll, ("h_roll", "W_roll", "bias_roll"))


def _validate(h, W, tokens, bias, mask, h_roll, W_roll, bias_roll, keep, rule, threshold,
              temperature):
    """Checked inputs, the valid positions ``pos (N,)`` and the tokens there ``k (N,)``."""
    h, W, bias = _check_head(h, W, bias, ("h", "W", "bias"))
    B, T, V = h.shape[0], h.shape[1], W.shape[0]
    k = torch.as_tensor(tokens)
    if k.is_floating_point() or k.shape != h.shape[:2]:
        raise ValueError(f"tokens must be integer ids of shape (B, T) = {tuple(h.shape[:2])}; "
                         f"got dtype {k.dtype}, shape {tuple(k.shape)}")
    m = (torch.ones(B, T, dtype=torch.bool, device=h.device) if mask is None
         else check_mask(mask, k, "mask", allow_empty=True))
    pos = m.reshape(-1).nonzero()[:, 0]                                # (N,)
    k = k.reshape(-1)[pos].long()
    if k.numel() and (k.min() < 0 or k.max() >= V):
        raise ValueError(f"tokens must lie in [0, {V}) where mask is true; got range "
                         f"[{int(k.min())}, {int(k.max())}]")
    roll = _check_roll(h, W, bias, h_roll, W_roll, bias_roll)
    if roll is not None:
        if roll[0].shape[:2] != h.shape[:2] or roll[1].shape[0] != V:
            raise ValueError(f"h_roll {tuple(roll[0].shape)} and W_roll {tuple(roll[1].shape)} "
                             f"must have (B, T) = {(B, T)} and V = {V} like h and W")
    if rule is not None and keep is not None:
        raise ValueError("give either keep (an explicit safe set) or rule, not both")
    thr = check_rule(rule, threshold)
    if keep is not None:
        keep = check_mask(keep, torch.empty(B, T, V, device="meta"), "keep",
                          allow_empty=True).reshape(B * T, V)
        if not keep[pos, k].all():
            raise ValueError("tokens must lie inside the kept vocabulary keep where mask is true")
    if not (isinstance(temperature, (int, float)) and 0 < float(temperature) < math.inf):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return h, W, bias, pos, k, roll, keep, thr, float(temperature)


def fused_token_stats(h: Any, W: Any, tokens: Any, bias: Any = None, *, mask: Any = None,
                      h_roll: Any = None, W_roll: Any = None, bias_roll: Any = None,
                      keep: Any = None, rule: str | None = None, threshold: float = RHO_DEFAULT,
                      temperature: float = 1.0, token_tile: int | None = None,
                      vocab_tile: int | None = None) -> dict[str, torch.Tensor]:
    """``token_stats`` of the logits ``(h W^T + b) / tau`` without ever forming them.

    Source: DVP (P1, P3), OTB (S2, S3), TRM (T12, direction rollout || train), LOPTI (S1).
    Formulas in the module docstring. The safe set ``S``: ``keep`` (every sampled token must
    be in it), or ``rule`` at ``threshold`` on the rollout side's logits when it is given, else
    on these (the sampled token always kept), or every token. The rollout side is ``h_roll``,
    ``W_roll`` (with ``bias_roll``) or both; the one not given is this side's (a rollout copy of
    the weights on the same hidden states, or other hidden states through the same head). Only
    ``logp``
    carries a gradient (to ``h``, ``W``, ``bias``); the rollout side never does. float64 ``h``
    computes in float64, any other dtype in float32 (bf16 tiles are upcast before the product).
    Positions where ``mask`` is false are skipped and read 0. Extra memory: a few
    ``(token_tile, vocab_tile)`` tiles (``top_p``: one block of :data:`TOP_P_ELEMENTS`), never
    ``(B, T, V)``; the backward's extra is ``dh`` in the compute dtype and one tile of ``dW``.

    Shapes: h (B, T, H), W (V, H), tokens (B, T), bias (V,), mask (B, T) bool, h_roll (B, T, H'),
    W_roll (V, H'), keep (B, T, V) bool -> dict of (B, T): logp, entropy, sum_p2, log_sum_p2
    [, kl] [, pruned_mass].
    """
    h, W, bias, pos, k, roll, keep, thr, tau = _validate(
        h, W, tokens, bias, mask, h_roll, W_roll, bias_roll, keep, rule, threshold, temperature)
    tt, vt = check_tiles(token_tile, vocab_tile, W.shape[0], h.device)
    if rule == "top_p":
        tt = min(tt, max(1, TOP_P_ELEMENTS // W.shape[0]))
    B, T, H = h.shape
    dt = compute_dtype(h)
    hv = h.reshape(B * T, H)[pos]                                      # (N, H)
    roll_head = None
    if roll is not None:
        hr, Wr, br = (None if x is None else x.detach() for x in roll)
        roll_head = Head(hr.reshape(B * T, -1)[pos].to(dt), Wr, br, tau)
    kind = "keep" if keep is not None else rule
    safe = SafeSet(kind, thr, keep, pos, "roll" if roll is not None else "train")
    plan = _Plan(k, roll_head, safe, tau, tt, vt)
    names = [n for n in FUSED_STATS if (n != "kl" or roll is not None)
             and (n != "pruned_mass" or kind is not None)]
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (h, W, bias)):
        values = _FusedLogp.apply(hv, W, bias, plan)
    else:
        with torch.no_grad():
            out, _ = plan.run(Head(hv.to(dt), W, bias, tau))
        values = [out[n] for n in names]
    return {n: torch.zeros(B * T, dtype=dt, device=h.device).index_put((pos,), v).view(B, T)
            for n, v in zip(names, values)}


def naive_fused_token_stats(h: Any, W: Any, tokens: Any, bias: Any = None, *, mask: Any = None,
                            h_roll: Any = None, W_roll: Any = None, bias_roll: Any = None,
                            keep: Any = None, rule: str | None = None,
                            threshold: float = RHO_DEFAULT,
                            temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """Reference for :func:`fused_token_stats`: the full logits, then ``naive_token_stats``.

    Source: as :func:`fused_token_stats`. ``z = h W^T + b`` over every valid position in the
    compute dtype (bf16 upcast first), the safe set from ``dvp_keep`` on the rule side's logits,
    ``log_sum_p2 = log(sum_p2)``; autograd through ``log_softmax`` gives the gradients.

    Shapes: as :func:`fused_token_stats`.
    """
    h, W, bias, pos, k, roll, keep, thr, tau = _validate(
        h, W, tokens, bias, mask, h_roll, W_roll, bias_roll, keep, rule, threshold, temperature)
    B, T, H = h.shape
    dt = compute_dtype(h)

    def logits(hh, WW, bb):                                            # (1, N, V)
        z = hh.reshape(B * T, -1)[pos].to(dt) @ WW.to(dt).T
        return (z if bb is None else z + bb.to(dt))[None]

    z = logits(h, W, bias)
    ref = None if roll is None else logits(*(None if x is None else x.detach() for x in roll))
    if rule is not None:
        keep = dvp_keep((z if ref is None else ref).detach(), k[None], rule, thr, tau)
    elif keep is not None:
        keep = keep[pos][None]
    st = naive_token_stats(z, k[None], ref_logits=ref, keep=keep, temperature=tau)
    st["log_sum_p2"] = st["sum_p2"].log()
    return {n: torch.zeros(B * T, dtype=dt, device=h.device).index_put((pos,), st[n][0])
            .view(B, T) for n in FUSED_STATS if n in st}


__all__ = ["TOP_P_ELEMENTS", "FUSED_STATS", "fused_token_stats", "naive_fused_token_stats"]
