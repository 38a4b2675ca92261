"""Accumulation of the token mismatch along sequences (DVP; claim M6).

Source: DVP, Li et al., *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*,
arXiv 2512.23087; TIM (Zhong et al., arXiv 2605.14220) for the sequence-level mismatch. Sign
convention as in :mod:`tailtheory.mismatch.logprob`: ``Delta_t = log p'_t - log p_t`` of the
sampled token (inference minus trainer).

Claim:

- M6 ``log pi_train(y) / pi_infer(y) = -sum_t Delta_t`` (:func:`sequence_log_ratio`); its mean
  drifts linearly in the number of sampled tail tokens (trainer ``p < TAIL_P``), not like
  ``sqrt(T)``: simulated sequences (:func:`simulate_sequences`), the regression
  (:func:`accumulation_regression`) and the curves of :func:`accumulation_table`.

Shapes: per-token mismatch Delta_tok (B, T), response mask (B, T) bool, per-sequence (B,).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import (as_tensor, check_finite, check_mask, check_nonneg,
                                     check_positive_int, check_same_shape)
from tailtheory.mismatch.logprob import logprob_mismatch

TAIL_P = 0.1
"""A sampled token is a *tail token* when the trainer gave it ``p < TAIL_P`` (M6's regressor)."""


def sequence_log_ratio(Delta_tok, mask=None) -> torch.Tensor:
    """``log pi_train(y) / pi_infer(y) = -sum_t Delta_t`` over the response tokens (M6).

    Source: DVP (M6); TIM's sequence-level mismatch (``sum_t delta_t`` in its sign).

    The mask selects, it never weights: bool, or exactly 0/1 (``tailtheory.core.checks``).

    Shapes: Delta_tok (B, T), mask (B, T) bool or None -> (B,).
    """
    D = check_finite(as_tensor(Delta_tok, "Delta_tok"), "Delta_tok")
    if D.ndim != 2:
        raise ValueError(f"Delta_tok must have shape (B, T), got {tuple(D.shape)}")
    if mask is None:
        return -D.sum(-1)
    m = check_mask(mask, D, "mask", allow_empty=True, like_name="Delta_tok")
    return -(D * m.to(D.dtype)).sum(-1)


HEAD_LOGIT = 12.0
"""Logit margin of the top token in a *head context* of :func:`simulate_sequences` (p ~ 0.9998)."""


def simulate_sequences(B: int, T_max: int, V: int, sigma: float, seed: int = 0) -> dict:
    """Sequences sampled by an engine whose logits carry Gaussian noise ``N(0, sigma^2)`` (M6).

    Each sequence has a length ``T`` in ``[T_max/8, T_max]`` and a tail fraction ``f ~ U(0, 1)``,
    drawn independently. Each step is a *tail context* with probability ``f`` (trainer logits
    ``0.3 N(0, I)``: nearly uniform, every token is a tail token) or else a *head context* (one
    token ``HEAD_LOGIT`` above the rest). The engine samples ``y_t ~ softmax(z + delta)``.

    Shapes: -> dict with Delta_tok, p_tok (B, T_max) float64, mask (B, T_max) bool,
    T, n_tail (B,) int64.
    """
    B, T_max = check_positive_int(B, "B"), check_positive_int(T_max, "T_max")
    V, sigma = check_positive_int(V, "V", 2), float(check_nonneg(sigma, "sigma"))
    g = torch.Generator().manual_seed(seed)
    f = torch.rand(B, 1, generator=g, dtype=torch.float64)  # (B, 1)
    T = torch.randint(max(T_max // 8, 1), T_max + 1, (B,), generator=g)  # (B,)
    z = 0.3 * torch.randn(B, T_max, V, generator=g, dtype=torch.float64)  # (B, T, V)
    head_ctx = torch.rand(B, T_max, generator=g, dtype=torch.float64) >= f  # (B, T)
    z[..., 0] += HEAD_LOGIT * head_ctx
    delta = sigma * torch.randn(B, T_max, V, generator=g, dtype=torch.float64)
    p_prime = torch.softmax(z + delta, -1)
    y = torch.multinomial(p_prime.reshape(-1, V), 1, generator=g).reshape(B, T_max)  # (B, T)
    Delta = logprob_mismatch(z, z + delta).gather(-1, y[..., None])[..., 0]  # (B, T)
    p_tok = torch.softmax(z, -1).gather(-1, y[..., None])[..., 0]  # (B, T)
    mask = torch.arange(T_max)[None, :] < T[:, None]  # (B, T)
    n_tail = ((p_tok < TAIL_P) & mask).sum(-1)
    return dict(Delta_tok=Delta, p_tok=p_tok, mask=mask, T=T, n_tail=n_tail)


def _ols(X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Least squares ``y ~ [1, X]``: coefficients, their standard errors, R^2."""
    X = torch.cat([torch.ones(len(y), 1, dtype=torch.float64), X.reshape(len(y), -1)], 1)
    coef = torch.linalg.lstsq(X, y[:, None]).solution[:, 0]
    resid = y - X @ coef
    s2 = (resid ** 2).sum() / (len(y) - X.shape[1])
    se = torch.sqrt(torch.diag(s2 * torch.linalg.inv(X.T @ X)))
    return coef, se, float(1 - resid.var() / y.var())


def accumulation_regression(log_ratio, n_tail, T) -> dict[str, float]:
    """Regress the sequence log-ratio on the number of tail tokens and on ``sqrt(T)`` (M6).

    Source: DVP (M6). One-regressor fits (slope, R^2) on ``n_tail``, ``sqrt(T)`` and ``T``, and
    the joint fit on ``(n_tail, sqrt(T))`` with t-statistics: M6 predicts the drift is carried
    by ``n_tail`` (slope about ``-sigma^2/2``) and the ``sqrt(T)`` coefficient is about 0.

    Shapes: log_ratio, n_tail, T (B,) -> dict of floats.
    """
    y = check_finite(as_tensor(log_ratio, "log_ratio"), "log_ratio")
    n_tail, T = as_tensor(n_tail, "n_tail"), as_tensor(T, "T")
    check_same_shape(y, n_tail, ("log_ratio", "n_tail"))
    check_same_shape(y, T, ("log_ratio", "T"))
    out: dict[str, float] = {}
    for name, x in (("n_tail", n_tail), ("sqrt_T", T.sqrt()), ("T", T)):
        coef, _, r2 = _ols(x, y)
        out[f"slope/{name}"], out[f"r2/{name}"] = float(coef[1]), r2
    coef, se, r2 = _ols(torch.stack([n_tail, T.sqrt()], 1), y)
    t = coef / se
    out.update({"joint/slope_tail": float(coef[1]), "joint/t_tail": float(t[1]),
                "joint/slope_sqrt_T": float(coef[2]), "joint/t_sqrt_T": float(t[2]),
                "r2/joint": r2})
    return out


MIN_ALIVE = 30
"""Positions where fewer sequences of a group are still running are left out of its curve."""

ACCUMULATION_GROUPS = ("many tail tokens", "few tail tokens")
"""The groups of :func:`accumulation_table`: the top and bottom quartiles of tail fraction."""


def accumulation_table(sigma: float = 0.3, B: int = 600, T_max: int = 96, V: int = 32,
                       seed: int = 0):
    """Cumulative ``log pi_train / pi_infer`` along sequences with many vs few tail tokens (M6).

    Source: DVP (M6). Simulated with :func:`simulate_sequences`; sequences are split at the
    quartiles of their tail fraction over the first ``T_max/8`` positions (every sequence is at
    least that long). Per group and position: mean and sd over the sequences still running
    (NaN where fewer than :data:`MIN_ALIVE` are).

    Shapes: -> DataFrame with 2 T_max rows, columns t, group, mean, sd.
    """
    import numpy as np
    import pandas as pd

    sim = simulate_sequences(B, T_max, V, sigma, seed)
    tail = (sim["p_tok"] < TAIL_P).double()
    frac = tail[:, : T_max // 8].mean(-1)                                   # (B,)
    cum = -torch.cumsum(sim["Delta_tok"], -1)  # (B, T): log pi_train / pi_infer up to t
    cum = torch.where(sim["mask"], cum, torch.nan).numpy()  # ended sequences leave the mean
    lo, hi = torch.quantile(frac, 0.25), torch.quantile(frac, 0.75)
    t = np.arange(1, T_max + 1)
    rows = []
    for name, sel in zip(ACCUMULATION_GROUPS, (frac >= hi, frac <= lo)):
        alive = (~np.isnan(cum[sel.numpy()])).sum(0) >= MIN_ALIVE
        mean = np.where(alive, np.nanmean(cum[sel.numpy()], 0), np.nan)
        sd = np.where(alive, np.nanstd(cum[sel.numpy()], 0), np.nan)
        rows.append(pd.DataFrame({"t": t, "group": name, "mean": mean, "sd": sd}))
    return pd.concat(rows, ignore_index=True)
