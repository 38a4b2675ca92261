"""Per-token statistics of a language model's logits in one chunked pass.

Source: DVP (Li et al., arXiv 2512.23087) for the pruned distribution and its mass (P1);
OTB (Li et al., arXiv 2602.07078) for ``sum_j p_j^2`` (S2, S3); TRM (Li et al., arXiv 2512.23075)
for the token KL in the direction rollout || train (T12).

For logits ``z (B, T, V)``, sampled tokens ``k (B, T)``, temperature ``tau`` and an optional kept
vocabulary ``S`` (``keep (B, T, V)``), the sampled distribution is
``pi = softmax(z / tau)`` restricted to ``S`` and renormalised (``-inf`` outside ``S``). Per token:

    logp        = log pi(k)                       = z_k / tau - LSE_S(z / tau)
    entropy     = -sum_v pi(v) log pi(v)
    sum_p2      = sum_v pi(v)^2                   (OTB's energy term, S2)
    kl          = KL(pi_ref || pi)                (pi_ref: same tau and S on ref_logits)
    pruned_mass = 1 - softmax(z / tau)(S)         = sum_{v not in S} softmax(z / tau)_v   (P1)

:func:`token_stats` never forms a full ``(B, T, V)`` temporary: it walks the positions in
chunks of ``chunk_size`` tokens, so its extra memory is a few chunk-sized tensors. ``logp`` is
differentiable through a custom backward that recomputes ``softmax`` chunk by chunk
(``d logp / dz = (e_k - pi) / tau`` on ``S``, 0 outside, claim S1), so autograd stores no
``(B, T, V)`` activation either; the only full-size tensor in the backward is the gradient of
the logits itself. :func:`naive_token_stats` is the obvious ``log_softmax``-then-gather code; a
test asserts the two agree (float64: 1e-12; float32: see ``tests/core/test_stats.py``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import torch

from tailtheory.core.checks import (as_tensor, check_mask, check_masked_logits, check_positive_int,
                                    check_same_shape, check_tokens)

CHUNK_ELEMENTS = 2**22
"""Logits per chunk when ``chunk_size`` is None: 16 MiB in float32 (V = 152k: 27 tokens)."""

STATS = ("logp", "entropy", "sum_p2", "kl", "pruned_mass")
"""Keys :func:`token_stats` may return (``kl`` only with ``ref_logits``, ``pruned_mass`` only
with ``keep``)."""


def row_blocks(n_rows: int, V: int) -> Iterator[slice]:
    """Slices of ``max(1, CHUNK_ELEMENTS // V)`` rows covering ``range(n_rows)``.

    The theory functions that take ``(..., V)`` logits flatten them to ``(n_rows, V)`` and walk
    these blocks, so their float64 temporaries are a few blocks, not a few logits tensors. Read
    at call time: a test shrinks ``CHUNK_ELEMENTS`` to force many blocks.
    """
    step = max(1, CHUNK_ELEMENTS // max(V, 1))
    for r0 in range(0, n_rows, step):
        yield slice(r0, min(n_rows, r0 + step))


def map_row_blocks(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    """``fn`` on blocks of rows (:func:`row_blocks`), reassembled: the chunked form of a per-row
    formula. ``xs[0]`` is ``(..., V)``; every ``x`` shares its leading shape ``(...)`` (tokens
    ``(...)``, a second ``(..., V)``). ``fn`` maps blocks ``(r, V)`` / ``(r,)`` to ``(r,)`` or
    ``(r, V)``, so the result is ``(...)`` or ``(..., V)``.
    """
    lead, V = xs[0].shape[:-1], xs[0].shape[-1]
    n = math.prod(lead)
    flat = [x.reshape((n, *x.shape[len(lead):])) for x in xs]           # (n, V) / (n,)
    if n == 0:
        y = fn(*flat)
        return y.reshape((*lead, *y.shape[1:]))
    out = None
    for r in row_blocks(n, V):
        y = fn(*(f[r] for f in flat))
        if out is None:
            out = y.new_empty((n, *y.shape[1:]))
        out[r] = y
    return out.reshape((*lead, *out.shape[1:]))


def _compute_dtype(z: torch.Tensor) -> torch.dtype:
    return torch.float64 if z.dtype == torch.float64 else torch.float32


def _chunks(B: int, T: int, n_tok: int) -> Iterator[tuple[slice, slice]]:
    """Blocks of about ``n_tok`` positions: whole batch rows times a slice of T when they fit."""
    if B * T == 0:
        return
    if n_tok >= B:
        step = max(1, n_tok // B)
        for t0 in range(0, T, step):
            yield slice(0, B), slice(t0, min(T, t0 + step))
    else:
        for b0 in range(0, B, n_tok):
            for t in range(T):
                yield slice(b0, min(B, b0 + n_tok)), slice(t, t + 1)


def _validate(logits, tokens, ref_logits, keep, temperature, chunk_size):
    z = as_tensor(logits, "logits", dtype=None)
    if z.ndim != 3:
        raise ValueError(f"logits must have shape (B, T, V); got {tuple(z.shape)}")
    if z.shape[-1] < 1:
        raise ValueError("logits has an empty vocabulary dimension")
    k = check_tokens(tokens, z, "tokens")
    ref = None
    if ref_logits is not None:
        ref = as_tensor(ref_logits, "ref_logits", dtype=None)
        check_same_shape(ref, z, ("ref_logits", "logits"))
    if keep is not None:
        keep = check_mask(keep, z, "keep", allow_empty=True)
    if not (isinstance(temperature, (int, float)) and 0 < float(temperature) < float("inf")):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    n_tok = (max(1, CHUNK_ELEMENTS // z.shape[-1]) if chunk_size is None
             else check_positive_int(chunk_size, "chunk_size"))
    return z, k, ref, keep, float(temperature), n_tok


def _chunk_logits(z: torch.Tensor, idx, tau: float, name: str,
                  offset) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A chunk in the compute dtype, divided by ``tau``, and its support ``z > -inf`` (None when
    every entry is finite). NaN/inf make its row sums non-finite, a read-only pass far cheaper
    than ``isfinite`` over the chunk; only then is it inspected: NaN, ``+inf`` and rows of
    ``-inf`` only raise, other ``-inf`` entries are masked tokens."""
    zc = z[idx]
    fin = None
    if not torch.isfinite(zc.sum(-1, dtype=_compute_dtype(z))).all():
        check_masked_logits(zc, f"{name} (chunk at [b, t] = {offset})")
        fin = zc > -math.inf
    zc = zc.to(_compute_dtype(z))
    return (zc / tau if tau != 1.0 else zc), fin


def _support(kc: torch.Tensor | None, fin: torch.Tensor | None, at, name: str):
    """Where ``pi`` may be > 0: kept and finite; raises if a row has no such token."""
    if fin is None:
        return kc
    sup = fin if kc is None else kc & fin
    if kc is not None and not sup.any(-1).all():
        raise ValueError(f"keep must keep at least one token whose {name} is finite; a row near "
                         f"[b, t] = {at} keeps only -inf entries")
    return sup


def _log_pi(zc: torch.Tensor, kc: torch.Tensor | None) -> torch.Tensor:
    """``log pi`` on the chunk: fused log_softmax, ``-inf`` outside ``S``."""
    if kc is None:
        return torch.log_softmax(zc, -1)
    return torch.log_softmax(zc.masked_fill(~kc, -math.inf), -1)


def _xlogy_sum(p: torch.Tensor, lx: torch.Tensor, kc: torch.Tensor | None) -> torch.Tensor:
    """``sum_v p_v lx_v`` over ``S`` (outside ``S`` both are 0 / -inf: skip them)."""
    return (p * lx).sum(-1) if kc is None else torch.where(kc, p * lx, 0.0).sum(-1)


def _one_pass(z, k, ref, keep, tau, n_tok) -> dict[str, torch.Tensor]:
    """Every statistic, chunk by chunk."""
    B, T, _ = z.shape
    dt = _compute_dtype(z)
    names = ["logp", "entropy", "sum_p2"] + ["kl"] * (ref is not None)
    out = {n: torch.zeros(B, T, dtype=dt, device=z.device)
           for n in names + ["pruned_mass"] * (keep is not None)}
    for bs, ts in _chunks(B, T, n_tok):
        idx, at = (bs, ts), (bs.start, ts.start)
        zc, fz = _chunk_logits(z, idx, tau, "logits", at)              # (b, t, V)
        kc = keep[idx] if keep is not None else None
        kk = k[idx].unsqueeze(-1)
        if kc is not None and not kc.any(-1).all():
            raise ValueError(f"keep must keep at least one token at every position; a row near "
                             f"[b, t] = {at} keeps none")
        if kc is not None and not kc.gather(-1, kk).all():
            raise ValueError(f"tokens must lie inside the kept vocabulary keep; a token near "
                             f"[b, t] = {at} is pruned")
        sz = _support(kc, fz, at, "logit")                             # pi > 0 there
        lp = _log_pi(zc, kc)                                       # (b, t, V)
        p = lp.exp()                                                   # pi, 0 outside S
        out["logp"][idx] = lp.gather(-1, kk).squeeze(-1)
        out["entropy"][idx] = -_xlogy_sum(p, lp, sz)
        out["sum_p2"][idx] = (p * p).sum(-1)
        if ref is not None:
            rc, fr = _chunk_logits(ref, idx, tau, "ref_logits", at)
            lq = _log_pi(rc, kc)
            out["kl"][idx] = _xlogy_sum(lq.exp(), lq - lp, _support(kc, fr, at, "ref_logit"))
        if kc is not None:  # sum over the pruned tokens: exact also when m is tiny
            m = torch.softmax(zc, -1).masked_fill(kc, 0.0).sum(-1)
            out["pruned_mass"][idx] = m.clamp(max=1.0)
    return out


class _ChunkedLogp(torch.autograd.Function):
    """``logp`` with a backward that recomputes ``pi`` chunk by chunk (claim S1)."""

    @staticmethod
    def forward(ctx, z, k, ref, keep, tau, n_tok):
        out = _one_pass(z, k, ref, keep, tau, n_tok)
        ctx.save_for_backward(z, k, keep if keep is not None else torch.empty(0))
        ctx.has_keep, ctx.tau, ctx.n_tok = keep is not None, tau, n_tok
        rest = [out[n] for n in STATS[1:] if n in out]
        ctx.mark_non_differentiable(*rest)
        return (out["logp"], *rest)

    @staticmethod
    def backward(ctx, g_logp, *unused):
        z, k, keep = ctx.saved_tensors
        grad = torch.empty_like(z)
        B, T, _ = z.shape
        for bs, ts in _chunks(B, T, ctx.n_tok):
            idx = (bs, ts)
            zc = z[idx].to(_compute_dtype(z))
            zc = zc / ctx.tau if ctx.tau != 1.0 else zc
            if ctx.has_keep:
                zc = zc.masked_fill(~keep[idx], -math.inf)
            g = g_logp[idx].to(zc.dtype).unsqueeze(-1)
            if ctx.tau != 1.0:
                g = g / ctx.tau
            gc = torch.softmax(zc, -1).mul_(-g).scatter_add_(-1, k[idx].unsqueeze(-1), g)
            grad[idx] = gc                                             # (e_k - pi) g / tau
        return grad, None, None, None, None, None


def token_stats(logits: Any, tokens: Any, ref_logits: Any = None, keep: Any = None,
                temperature: float = 1.0, chunk_size: int | None = None) -> dict[str, torch.Tensor]:
    """Log-prob of the sampled token, entropy, sum p^2, token KL and pruned mass in one pass.

    Source: DVP (P1), OTB (S2, S3), TRM (T12 token KL, direction ref || this).
    ``logp = z_k/tau - LSE_S(z/tau)``; the other statistics as in the module docstring, all of
    the distribution ``softmax(z/tau)`` restricted to ``keep`` and renormalised. ``ref_logits``
    get the same temperature and ``keep``. Only ``logp`` carries a gradient (to ``logits``);
    the others are detached. Chunked over positions: extra memory ~ a few ``(chunk_size, V)``
    tensors, never ``(B, T, V)``. Float64 logits compute in float64, anything else in float32.
    ``-inf`` logits are masked tokens (probability 0, as in ``keep``; a sampled one gets
    ``logp = -inf``); NaN, ``+inf`` or a position whose logits are all ``-inf`` raise.

    Shapes: logits (B, T, V), tokens (B, T), ref_logits (B, T, V), keep (B, T, V) bool
    -> dict of (B, T): logp, entropy, sum_p2 [, kl] [, pruned_mass].
    """
    z, k, ref, keep, tau, n_tok = _validate(logits, tokens, ref_logits, keep, temperature,
                                            chunk_size)
    names = [n for n in STATS if n not in ("kl", "pruned_mass")
             or (n == "kl" and ref is not None) or (n == "pruned_mass" and keep is not None)]
    if z.requires_grad and torch.is_grad_enabled():
        values = _ChunkedLogp.apply(z, k, None if ref is None else ref.detach(), keep, tau, n_tok)
        return dict(zip(names, values))
    with torch.no_grad():
        out = _one_pass(z, k, ref, keep, tau, n_tok)
    return {n: out[n] for n in names}


def naive_token_stats(logits: Any, tokens: Any, ref_logits: Any = None, keep: Any = None,
                      temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """Reference for :func:`token_stats`: full ``log_softmax`` over ``(B, T, V)``, then gather/sum.

    Source: as :func:`token_stats`. Same formulas, written the obvious way; it holds several
    ``(B, T, V)`` temporaries and autograd stores the full ``log_softmax``.

    Shapes: as :func:`token_stats`.
    """
    z, k, ref, keep, tau, _ = _validate(logits, tokens, ref_logits, keep, temperature, None)
    check_masked_logits(z, "logits")
    if keep is not None and not keep.gather(-1, k.unsqueeze(-1)).all():
        raise ValueError("tokens must lie inside the kept vocabulary keep")
    if keep is not None and not (keep & (z > -math.inf)).any(-1).all():
        raise ValueError("keep must keep at least one token whose logit is finite")
    zt = z.to(_compute_dtype(z)) / tau
    zs = zt if keep is None else zt.masked_fill(~keep, float("-inf"))
    lp = torch.log_softmax(zs, -1)                                     # (B, T, V)
    p = lp.exp()
    out = {"logp": lp.gather(-1, k.unsqueeze(-1)).squeeze(-1),
           "entropy": -torch.where(p > 0, p * lp, 0.0).sum(-1).detach(),
           "sum_p2": p.pow(2).sum(-1).detach()}
    if ref is not None:
        check_masked_logits(ref, "ref_logits")
        if keep is not None and not (keep & (ref > -math.inf)).any(-1).all():
            raise ValueError("keep must keep at least one token whose ref_logit is finite")
        rt = ref.to(zt.dtype) / tau
        lq = torch.log_softmax(rt if keep is None else rt.masked_fill(~keep, float("-inf")), -1)
        q = lq.exp()
        out["kl"] = torch.where(q > 0, q * (lq - lp), 0.0).sum(-1).detach()
    if keep is not None:
        if (~keep.any(-1)).any():
            raise ValueError("keep must keep at least one token at every position")
        out["pruned_mass"] = 1 - (torch.softmax(zt, -1) * keep).sum(-1).detach()
    return out


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """The mean of ``x`` over ``mask``, detached, in float64 (0 when the mask is empty): how
    every metric of a training step averages over tokens.

    Shapes: x, mask (B, T) or (B,) -> float."""
    return float((x.detach().double() * mask).sum() / mask.sum().clamp(min=1))
