"""Input validation shared by every theory module.

Bad input gets a clear ``ValueError`` naming the argument, never a silent wrong number.
Every public function of the package converts its inputs with these helpers first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

ATOL_F64 = 1e-12
"""Absolute tolerance for identities checked in float64."""

PROB_SUM_ATOL = 1e-6
"""How far ``sum(p)`` may be from 1 before probabilities are rejected."""


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


def check_finite(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise if ``t`` holds NaN or inf, saying how many and where the first one is."""
    bad = ~torch.isfinite(t)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        kind = "NaN" if torch.isnan(t).any() else "inf"
        raise ValueError(
            f"{name} contains {int(bad.sum())} non-finite value(s) ({kind}); first at index {first}"
        )
    return t


def check_logits(x: Any, name: str = "logits", dtype: torch.dtype | None = torch.float64,
                 min_vocab: int = 1) -> torch.Tensor:
    """Logits ``(..., V)``: finite, at least one dimension, ``V >= min_vocab``."""
    t = as_tensor(x, name, dtype)
    if t.ndim == 0:
        raise ValueError(f"{name} must have a vocabulary dimension (..., V); got a scalar")
    if t.shape[-1] < min_vocab:
        raise ValueError(f"{name} has vocabulary size {t.shape[-1]}; need at least {min_vocab}")
    return check_finite(t, name)


def check_probs(x: Any, name: str = "p", atol: float = PROB_SUM_ATOL) -> torch.Tensor:
    """A probability vector ``(..., V)``: entries in [0, 1] summing to 1 within ``atol``."""
    t = check_logits(x, name)
    check_unit_interval(t, name)
    s = t.sum(-1)
    err = (s - 1).abs().max().item()
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


def check_mask(mask: Any, like: torch.Tensor, name: str = "mask",
               allow_empty: bool = False) -> torch.Tensor:
    """A boolean mask with the shape of ``like``; empty masks are an error unless allowed."""
    m = torch.as_tensor(np.asarray(mask)) if not isinstance(mask, torch.Tensor) else mask
    if m.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(m.shape)}, expected {tuple(like.shape)}")
    m = m.bool()
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
