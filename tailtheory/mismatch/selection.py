"""Selection bias of the tokens the inference engine samples (DVP; claims M4, M5).

Source: DVP, Li et al., *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*,
arXiv 2512.23087; sign convention of TIM (Zhong et al., arXiv 2605.14220), as in
:mod:`tailtheory.mismatch.logprob`: ``Delta_k = log p'_k - log p_k`` (inference minus trainer).

Notation. Trainer logits ``z`` (probabilities ``p``), engine logits ``z + delta`` (``p'``) with
i.i.d. Gaussian ``delta_j ~ N(0, sigma^2)``.

Claims:

- M4 (exact) ``E_{k ~ p'}[Delta_k] = KL(p' || p) >= 0`` (the quantity itself:
  :func:`tailtheory.mismatch.logprob.sampled_mismatch_bias`); measured per trainer-probability
  bin by :func:`selection_bias_table`.
- M5 (second order) ``E[Delta_k | k sampled] ~ sigma^2 [(1 - p_k)^2 + sum_{j != k} p_j^2]
  - sigma^2 (1 - sum_j p_j^2) / 2`` (:func:`sampled_bias_second_order`), checked by Monte Carlo
  (:func:`sampled_bias_monte_carlo`).

Shapes: p (..., V) probabilities, sigma scalar; per-token predictions (..., V).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import check_broadcastable, check_nonneg, check_probs
from tailtheory.mismatch.logprob import logprob_mismatch


def sampled_bias_second_order(p, sigma) -> torch.Tensor:
    """M5's second-order prediction of ``E[Delta_k | k sampled]`` for ``delta_j ~ N(0, sigma^2)``.

    Source: DVP (M5, derived)::

        sigma^2 [(1 - p_k)^2 + sum_{j != k} p_j^2] - sigma^2 (1 - sum_j p_j^2) / 2

    Shapes: p (..., V), sigma scalar -> (..., V).
    """
    p = check_probs(p, "p")
    s2 = check_nonneg(sigma, "sigma") ** 2
    check_broadcastable(p, s2, ("p", "sigma"))
    sum_sq = (p ** 2).sum(-1, keepdim=True)  # (..., 1)
    return s2 * ((1 - p) ** 2 + sum_sq - p ** 2) - 0.5 * s2 * (1 - sum_sq)


def sampled_bias_monte_carlo(p, sigma, n_draws: int = 20_000, seed: int = 0) -> torch.Tensor:
    """Monte Carlo ``E[Delta_k | k sampled]`` with ``delta_j ~ N(0, sigma^2)`` i.i.d. (checks M5).

    Source: DVP (M5). ``P(k sampled | delta) = p'_k``, so the conditional mean is
    ``E[Delta_k p'_k] / E[p'_k]``, estimated over antithetic pairs ``(delta, -delta)`` (the
    first-order term of ``Delta`` cancels exactly within a pair).

    Shapes: p (V,) -> (V,).
    """
    p = check_probs(p, "p")
    if p.ndim != 1:
        raise ValueError(f"p must be one probability vector (V,), got shape {tuple(p.shape)}")
    sigma = float(check_nonneg(sigma, "sigma"))
    g = torch.Generator().manual_seed(seed)
    half = torch.randn(max(n_draws // 2, 1), p.shape[0], generator=g, dtype=torch.float64)
    delta = sigma * torch.cat([half, -half])  # (n, V)
    Delta = delta - torch.logsumexp(torch.log(p) + delta, -1, keepdim=True)  # (n, V), M1
    w = p * torch.exp(Delta)  # p'_k of each draw, (n, V)
    return (w * Delta).sum(0) / w.sum(0)


def selection_bias_table(sigma: float = 0.3, V: int = 64, n_contexts: int = 20_000,
                         n_bins: int = 10, seed: int = 0):
    """Mean signed ``Delta`` of engine-sampled tokens per trainer-probability bin (M4, M5).

    Source: DVP (M4, M5). Contexts have logits ``s N(0, I)`` with ``s`` from 0.3 to 8; the engine
    adds ``N(0, sigma^2)`` noise and samples one token per context. Columns: p_lo, p_hi, p_mid,
    count, mean_Delta, sem, m5 (M5's second-order prediction averaged over the bin).

    Shapes: -> DataFrame with <= n_bins rows (empty bins are left out).
    """
    import numpy as np
    import pandas as pd

    g = torch.Generator().manual_seed(seed)
    s = 0.3 + 7.7 * torch.rand(n_contexts, 1, generator=g, dtype=torch.float64)
    z = s * torch.randn(n_contexts, V, generator=g, dtype=torch.float64)  # (N, V)
    delta = sigma * torch.randn(n_contexts, V, generator=g, dtype=torch.float64)
    k = torch.multinomial(torch.softmax(z + delta, -1), 1, generator=g)  # (N, 1)
    p = torch.softmax(z, -1)
    Delta = logprob_mismatch(z, z + delta).gather(-1, k)[:, 0]
    m5 = sampled_bias_second_order(p, sigma).gather(-1, k)[:, 0]
    p_k = p.gather(-1, k)[:, 0]
    edges = np.logspace(np.log10(max(float(p_k.min()), 1e-12)), 0, n_bins + 1)
    df = pd.DataFrame({"p": p_k.numpy(), "Delta": Delta.numpy(), "m5": m5.numpy(),
                       "bin": np.clip(np.digitize(p_k.numpy(), edges[1:-1]), 0, n_bins - 1)})
    out = df.groupby("bin").agg(p_mid=("p", "median"), count=("p", "size"),
                                mean_Delta=("Delta", "mean"), sd=("Delta", "std"),
                                m5=("m5", "mean")).reset_index()
    out["p_lo"], out["p_hi"] = edges[out["bin"]], edges[out["bin"] + 1]
    out["sem"] = out.sd / np.sqrt(out["count"])
    return out.drop(columns="sd")
