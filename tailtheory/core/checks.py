"""Input validation shared by every theory module.

Bad input gets a clear ``ValueError`` naming the argument, never a silent wrong number.
Every public function of the package converts its inputs with these helpers first.

Rules every theory function follows:

- **Logits** ``(..., V)``: NaN and ``+inf`` are errors; ``-inf`` is a masked token (probability
  0, as :func:`tailtheory.pruning.vocab.pruned_log_softmax` produces) and is accepted wherever
  the row has at least one finite entry; a row that is entirely ``-inf`` is an error (no
  distribution). Results then equal those on the row restricted to its finite entries.
- **Probabilities** ``(..., V)``: entries in [0, 1] whose sum is 1 within a tolerance set by the
  dtype the caller passed (:func:`prob_sum_atol`), so bf16/fp16 softmax outputs are accepted.
- **Masks**: a ``bool`` tensor or array, or a numeric one whose every value is exactly 0 or 1
  (an integer attention mask, ``mask.float()``), returned as ``bool``. Anything else (0.5, 2,
  NaN) raises: a mask is never a weight.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

ATOL_F64 = 1e-12
"""Absolute tolerance for identities checked in float64."""

PROB_SUM_ATOL = 1e-6
"""Floor of the tolerance on ``|sum(p) - 1|``: the whole tolerance for float64 probabilities."""

PROB_SUM_ULPS = 4.0
"""Multiple of the rounding bound in :func:`prob_sum_atol`. Measured on softmax outputs at
V = 2 .. 151,936 (logit scales 0.1 .. 30) the worst ``|sum(p) - 1|`` was 0.26 eps for bf16 and
fp16 and ~0.03 sqrt(V) eps for float32, so 4 leaves a margin above 10x in every dtype."""


def as_tensor(x: Any, name: str, dtype: torch.dtype | None = torch.float64) -> torch.Tensor:
    """Convert ``x`` (tensor, numpy array, list or scalar) to a torch tensor.

    With ``dtype=None`` a floating tensor keeps its dtype (bf16 checks need that) and
    anything else becomes float64.
    """
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, (np.ndarray, list, tuple, float, int, np.floating, np.integer)):
        t = torch.as_tensor(np.asarray(x))
    else:
        raise TypeError(f"{name} must be a tensor, numpy array or number, got {type(x).__name__}")
    if dtype is not None:
        return t.to(dtype)
    return t if t.is_floating_point() else t.to(torch.float64)


def _sum_dtype(t: torch.Tensor) -> torch.dtype:
    """Accumulator of the cheap finiteness sums: float16 would overflow on finite logits."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def check_finite(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise if ``t`` holds NaN or inf, saying how many and where the first one is.

    A finite sum proves every entry finite without a tensor-sized temporary; only a non-finite
    sum (a bad entry, or finite values whose sum overflows) pays for the elementwise scan.
    """
    if not t.is_floating_point() or torch.isfinite(t.sum(dtype=_sum_dtype(t))):
        return t
    bad = ~torch.isfinite(t)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        kind = "NaN" if torch.isnan(t).any() else "inf"
        raise ValueError(
            f"{name} contains {int(bad.sum())} non-finite value(s) ({kind}); first at index {first}"
        )
    return t


def check_logits(x: Any, name: str = "logits", dtype: torch.dtype | None = torch.float64,
                 min_vocab: int = 1, allow_masked: bool = True) -> torch.Tensor:
    """Logits ``(..., V)``: at least one dimension, ``V >= min_vocab``, no NaN or ``+inf``.

    ``-inf`` entries (masked tokens) are accepted when every row keeps a finite entry
    (:func:`check_masked_logits`); ``allow_masked=False`` refuses them too (perturbations
    ``delta``, probabilities).
    """
    t = as_tensor(x, name, dtype)
    if t.ndim == 0:
        raise ValueError(f"{name} must have a vocabulary dimension (..., V); got a scalar")
    if t.shape[-1] < min_vocab:
        raise ValueError(f"{name} has vocabulary size {t.shape[-1]}; need at least {min_vocab}")
    return check_masked_logits(t, name) if allow_masked else check_finite(t, name)


def has_minus_inf(t: torch.Tensor) -> bool:
    """After :func:`check_logits`: whether ``t`` holds ``-inf`` (masked) entries, from one sum
    (a finite sum that overflows also answers True, which only costs a needless exact path)."""
    return t.is_floating_point() and not bool(torch.isfinite(t.sum(dtype=_sum_dtype(t))))


def check_masked_logits(t: torch.Tensor, name: str = "logits") -> torch.Tensor:
    """Raise on NaN, ``+inf`` or a row (last axis) that is entirely ``-inf``; accept other ``-inf``.

    Row sums are finite for a clean row, ``-inf`` for a row with masked entries only, and NaN or
    ``+inf`` otherwise: only the rows whose sum is not finite are scanned entry by entry.
    """
    if not t.is_floating_point() or t.numel() == 0:
        return t
    V = t.shape[-1]
    s = t.reshape(-1, V).sum(-1, dtype=_sum_dtype(t))                  # (n,)
    rows = (~torch.isfinite(s)).nonzero()[:, 0]
    if rows.numel() == 0:
        return t
    sub = t.reshape(-1, V)[rows]                                       # (r, V): suspect rows
    bad = torch.isnan(sub) | (sub == math.inf)
    if bad.any():
        r, v = (int(i) for i in bad.nonzero()[0])
        first = tuple(int(i) for i in torch.unravel_index(rows[r], t.shape[:-1])) + (v,)
        kind = "NaN" if torch.isnan(sub).any() else "+inf"
        raise ValueError(f"{name} contains {int(bad.sum())} non-finite value(s) ({kind}); first "
                         f"at index {first} (only -inf, a masked token, is allowed)")
    dead = ~(sub > -math.inf).any(-1)
    if dead.any():
        first = tuple(int(i) for i in torch.unravel_index(rows[dead][0], t.shape[:-1]))
        raise ValueError(f"{name} has {int(dead.sum())} row(s) whose every entry is -inf (first "
                         f"at index {first}): no token has probability > 0 there")
    return t


def prob_sum_atol(dtype: torch.dtype, V: int) -> float:
    """Tolerance on ``|sum(p) - 1|`` for probabilities stored in ``dtype`` over ``V`` tokens.

    A softmax output rounded to ``dtype`` has each entry within half an ulp, so its sum is off
    by at most ``eps(dtype) / 2`` from the normaliser's; the normaliser itself is accumulated in
    at least float32 (torch does so for bf16/fp16 too), with a relative error growing like
    ``sqrt(V) eps`` for rounding errors of either sign. Hence
    ``PROB_SUM_ULPS * (eps(dtype) + sqrt(V) eps(acc))``, never below :data:`PROB_SUM_ATOL`
    (float64 probabilities keep that tolerance exactly). Float32, V = 151,936: 1.9e-4; bf16:
    0.031; fp16: 0.0041.
    """
    if not dtype.is_floating_point:
        return PROB_SUM_ATOL
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    eps, eps_acc = torch.finfo(dtype).eps, torch.finfo(acc).eps
    return max(PROB_SUM_ATOL, PROB_SUM_ULPS * (eps + math.sqrt(V) * eps_acc))


def check_probs(x: Any, name: str = "p", atol: float | None = None) -> torch.Tensor:
    """A probability vector ``(..., V)``: entries in [0, 1] summing to 1 within ``atol``.

    ``atol=None`` takes :func:`prob_sum_atol` of the dtype ``x`` arrives in (a bf16 softmax is a
    valid input). Returned as float64.
    """
    raw = as_tensor(x, name, dtype=None)
    t = check_logits(raw, name, allow_masked=False)
    check_unit_interval(t, name)
    if atol is None:
        atol = prob_sum_atol(raw.dtype, t.shape[-1])
    s = t.sum(-1)
    err = (s - 1).abs().max().item() if s.numel() else 0.0
    if err > atol:
        raise ValueError(f"{name} must sum to 1 along the last axis (tolerance {atol:g}); "
                         f"off by {err:.3g}")
    return t


def check_unit_interval(x: Any, name: str) -> torch.Tensor:
    """Values in [0, 1] (probabilities of single tokens, TV distances)."""
    t = check_finite(as_tensor(x, name), name)
    if t.numel() and (t.min() < 0 or t.max() > 1):
        raise ValueError(f"{name} must lie in [0, 1]; got range [{t.min().item():.6g}, "
                         f"{t.max().item():.6g}]")
    return t


def check_nonneg(x: Any, name: str) -> torch.Tensor:
    """Finite values >= 0 (divergences, epsilons)."""
    t = check_finite(as_tensor(x, name), name)
    if t.numel() and t.min() < 0:
        raise ValueError(f"{name} must be >= 0; got {t.min().item():.6g}")
    return t


def check_same_shape(a: torch.Tensor, b: torch.Tensor, names: tuple[str, str]) -> None:
    """Raise unless ``a`` and ``b`` have identical shapes."""
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} {tuple(a.shape)} and {names[1]} {tuple(b.shape)} "
                         f"must have the same shape")


def check_broadcastable(a: torch.Tensor, b: torch.Tensor,
                        names: tuple[str, str]) -> tuple[int, ...]:
    """The broadcast shape of ``a`` and ``b``; a ``ValueError`` naming both when there is none."""
    try:
        return tuple(torch.broadcast_shapes(a.shape, b.shape))
    except RuntimeError:
        raise ValueError(f"{names[0]} {tuple(a.shape)} and {names[1]} {tuple(b.shape)} must "
                         f"broadcast to one shape") from None


def check_tokens(token: Any, logits: torch.Tensor, name: str = "token") -> torch.Tensor:
    """Token ids of shape ``logits.shape[:-1]`` inside ``[0, V)``; returned as int64."""
    t = torch.as_tensor(np.asarray(token)) if not isinstance(token, torch.Tensor) else token
    if t.is_floating_point():
        raise ValueError(f"{name} must hold integer token ids, got dtype {t.dtype}")
    t = t.long()
    if t.shape != logits.shape[:-1]:
        raise ValueError(f"{name} has shape {tuple(t.shape)} but logits {tuple(logits.shape)} "
                         f"need {tuple(logits.shape[:-1])}")
    V = logits.shape[-1]
    if t.numel() and (t.min() < 0 or t.max() >= V):
        raise ValueError(f"{name} must lie in [0, {V}) (vocabulary size {V}); got range "
                         f"[{int(t.min())}, {int(t.max())}]")
    return t


MASK_RULE = ("a bool tensor, or a numeric one whose values are exactly 0 or 1 (a mask selects, "
             "it never weights)")
"""The one rule for masks (see the module docstring), quoted by :func:`check_mask`'s errors."""


def check_mask(mask: Any, like: torch.Tensor, name: str = "mask", allow_empty: bool = False,
               like_name: str | None = None) -> torch.Tensor:
    """A mask with the shape of ``like``, returned as ``bool``; empty is an error unless allowed.

    Accepts ``bool`` (tensor, array, list) or numbers that are exactly 0 or 1; anything else
    raises naming ``name``. With ``like_name`` a shape mismatch names both arguments.
    """
    m = torch.as_tensor(np.asarray(mask)) if not isinstance(mask, torch.Tensor) else mask
    if m.shape != like.shape:
        if like_name is not None:
            check_same_shape(like, m, (like_name, name))
        raise ValueError(f"{name} has shape {tuple(m.shape)}, expected {tuple(like.shape)}")
    if m.dtype != torch.bool:
        if m.is_complex():
            raise ValueError(f"{name} must be {MASK_RULE}; got dtype {m.dtype}")
        off = (m != 0) & (m != 1)
        if off.any():
            bad = m[off][0].item()
            raise ValueError(f"{name} must be {MASK_RULE}; got {int(off.sum())} other value(s), "
                             f"e.g. {bad!r}")
        m = m != 0
    if not allow_empty and not m.any():
        raise ValueError(f"{name} selects no element: nothing to average over")
    return m


def check_positive_int(n: Any, name: str, minimum: int = 1) -> int:
    """An integer ``>= minimum``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {n!r}")
    if n < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {n}")
    return int(n)
