"""Figures of training-inference mismatch (DVP, TIM; claims M3-M7).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``. The tables come from the theory modules
(``tailtheory.mismatch.real.mismatch_tokens``,
``tailtheory.mismatch.selection.selection_bias_table``,
``tailtheory.mismatch.accumulation.accumulation_table``); this module only draws them.
Notebook 01 (``make repro``) writes them into ``figures/``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from tailtheory.mismatch import logprob as mm
from tailtheory.mismatch.accumulation import accumulation_table
from tailtheory.mismatch.real import mismatch_tokens
from tailtheory.mismatch.selection import selection_bias_table

POINT_HEAD_P = 1e-2
"""Tokens above this trainer probability are all drawn: the (1-p) law lives there."""


def _points(trainer_logits, inference_logits, max_points: int, seed: int) -> pd.DataFrame:
    """Rows of :func:`mismatch_tokens`'s table to draw: every head token, ``max_points`` others."""
    tok = {k: v.flatten() for k, v in mismatch_tokens(trainer_logits, inference_logits).items()}
    p = tok["p"]
    g = torch.Generator().manual_seed(seed)
    head = (p > POINT_HEAD_P).nonzero()[:, 0]
    rest = (p <= POINT_HEAD_P).nonzero()[:, 0]
    idx = torch.cat([head, rest[torch.randperm(len(rest), generator=g)[:max_points]]])
    return pd.DataFrame({k: tok[k][idx].numpy() for k in ("p", "abs_Delta", "eps",
                                                           "bound_exact", "bound_first")})


def plot_mismatch_vs_p(pairs: Mapping[str, tuple], max_points: int = 5_000, seed: int = 0):
    """``|Delta|`` of tokens against ``1 - p`` (log axes), with M3's exact and first-order bounds.

    Source: DVP (M2, M3), TIM (M7). ``pairs`` maps a label (``"bf16"``) to
    ``(trainer_logits, inference_logits)``, each ``(B, T, V)``. The bounds are drawn at the
    largest measured ``eps`` (an envelope for every point) and at the median ``eps``. All tokens
    with ``p > 0.01`` are drawn, plus ``max_points`` random others.

    Returns ``(fig, df)`` with one row per plotted token (columns label, p, abs_Delta, eps,
    bound_exact, bound_first).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.6), squeeze=False)
    frames = []
    for ax, (label, (z, z_inf)) in zip(axes[0], pairs.items()):
        df = _points(z, z_inf, max_points, seed).assign(label=label)
        frames.append(df)
        grid = 1 - np.logspace(np.log10(max(1 - df.p.max(), 1e-12)), 0, 300)  # p values
        nz = df[df.abs_Delta > 0]
        ax.scatter(1 - nz.p, nz.abs_Delta, s=2, alpha=0.3, color="tab:blue", label="tokens")
        for eps, ls in ((df.eps.max(), "-"), (df.eps.median(), ":")):
            ax.plot(1 - grid, mm.mismatch_bound(grid, eps, "exact").numpy(), "k" + ls, lw=1,
                    label=f"exact bound, eps={eps:.2g}")
            ax.plot(1 - grid, mm.mismatch_bound(grid, eps, "first").numpy(), "r" + ls, lw=1,
                    label=f"first order, eps={eps:.2g}")
        ax.set(xscale="log", yscale="log", xlabel="1 - p (trainer)", title=label,
               ylim=(max(nz.abs_Delta.min(), 1e-12) if len(nz) else 1e-12, None))
    axes[0, 0].set_ylabel("|Delta| = |log p' - log p|")
    axes[0, -1].legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    return fig, pd.concat(frames, ignore_index=True)[["label", "p", "abs_Delta", "eps",
                                                       "bound_exact", "bound_first"]]


def plot_selection_bias(sigma: float = 0.3, V: int = 64, n_contexts: int = 20_000,
                        n_bins: int = 10, seed: int = 0):
    """Mean signed ``Delta`` of sampled tokens by probability bin, against M5's prediction.

    Source: DVP (M4: the mean is KL(p'||p) >= 0; M5: it concentrates on tail tokens).
    Returns ``(fig, df)`` with the table of :func:`selection_bias_table`.
    """
    import matplotlib.pyplot as plt

    df = selection_bias_table(sigma, V, n_contexts, n_bins, seed)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.errorbar(df.p_mid, df.mean_Delta, yerr=2 * df["sem"], fmt="o", ms=3, capsize=2,
                label="Monte Carlo (engine samples), ±2 s.e.")
    ax.plot(df.p_mid, df.m5, "r-", lw=1, label="M5 second order")
    ax.axhline(0, color="k", lw=0.5)
    ax.set(xscale="log", xlabel="trainer p of the sampled token",
           ylabel="mean Delta = log p' - log p", title=f"selection bias, sigma = {sigma:g}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, df


def plot_accumulation(sigma: float = 0.3, B: int = 600, T_max: int = 96, V: int = 32,
                      seed: int = 0):
    """Cumulative ``log pi_train / pi_infer`` along sequences with many vs few tail tokens (M6).

    Source: DVP (M6). Draws :func:`tailtheory.mismatch.accumulation.accumulation_table` (mean ±
    sd per group); the dotted curves are ``±sigma sqrt(t)``, the scale of a zero-mean random walk.
    Returns ``(fig, df)`` with columns t, group, mean, sd.
    """
    import matplotlib.pyplot as plt

    df = accumulation_table(sigma, B, T_max, V, seed)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, g in df.groupby("group", sort=False):
        ax.plot(g.t, g["mean"], label=name)
        ax.fill_between(g.t, g["mean"] - g.sd, g["mean"] + g.sd, alpha=0.2)
    t = np.arange(1, T_max + 1)
    ax.plot(t, sigma * np.sqrt(t), "k:", lw=1, label="± sigma sqrt(t)")
    ax.plot(t, -sigma * np.sqrt(t), "k:", lw=1)
    ax.set(xlabel="position t", ylabel="cumulative log pi_train / pi_infer",
           title=f"accumulation, sigma = {sigma:g}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, df
