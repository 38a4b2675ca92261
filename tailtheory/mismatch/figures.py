"""Figures of training-inference mismatch (DVP, TIM; claims M3-M7).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``. The tables come from the theory modules
(``tailtheory.mismatch.real.mismatch_tokens``,
``tailtheory.mismatch.selection.selection_bias_table``,
``tailtheory.mismatch.accumulation.accumulation_table``); this module only draws them.
Notebook 01 (``make repro``) writes them into ``figures/``. :func:`explore_m3` is notebook 01's
explorer (:mod:`tailtheory.core.explore`): sliders over :func:`plot_m3_explorer`, nothing saved.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from tailtheory.core.explore import Control, explorer, fast_log_ticks
from tailtheory.mismatch import logprob as mm
from tailtheory.mismatch.accumulation import accumulation_table
from tailtheory.mismatch.real import mismatch_tokens
from tailtheory.mismatch.selection import selection_bias_table
from tailtheory.softmax.scores import draw_logits

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
    ``(trainer_logits, inference_logits)``, each ``(B, T, V)``. All tokens with ``p > 0.01``
    are drawn, plus ``max_points`` random others (:func:`plot_mismatch_points` draws them).

    Returns ``(fig, df)`` with one row per plotted token (columns label, p, abs_Delta, eps,
    bound_exact, bound_first).
    """
    frames = [_points(z, z_inf, max_points, seed).assign(label=label)
              for label, (z, z_inf) in pairs.items()]
    return plot_mismatch_points(pd.concat(frames, ignore_index=True))


def plot_mismatch_points(points: pd.DataFrame):
    """The figure of :func:`plot_mismatch_vs_p` from its table: one panel per ``label``.

    Source: DVP (M2, M3), TIM (M7). ``points`` has columns label, p, abs_Delta, eps,
    bound_exact, bound_first (``plot_mismatch_vs_p``'s, or the chunked probe's of
    ``tailtheory.mismatch.chunked.mismatch_probe``). The bounds are drawn at the largest
    measured ``eps`` (an envelope for every point) and at the median ``eps``.

    Returns ``(fig, df)``: the figure and ``points`` in those columns.
    """
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(points.label))
    fig, axes = plt.subplots(1, len(labels), figsize=(4.2 * len(labels), 3.6), squeeze=False)
    for ax, label in zip(axes[0], labels):
        df = points[points.label == label]
        grid = 1 - np.logspace(np.log10(max(1 - df.p.max(), 1e-12)), 0, 300)  # p values
        nz = df[df.abs_Delta > 0]
        ax.scatter(1 - nz.p, nz.abs_Delta, s=2, alpha=0.3, color="tab:blue", label="tokens")
        for eps, ls, which in ((df.eps.max(), "-", "largest"), (df.eps.median(), ":", "median")):
            ax.plot(1 - grid, mm.mismatch_bound(grid, eps, "exact").numpy(), "k" + ls, lw=1,
                    label=f"M3's exact bound at the {which} eps")
            ax.plot(1 - grid, mm.mismatch_bound(grid, eps, "first").numpy(), "r" + ls, lw=1,
                    label=f"first order at the {which} eps")
        ax.set(xscale="log", yscale="log", xlabel="1 - p (trainer)",
               title=f"{label}: eps largest {df.eps.max():.2g}, median {df.eps.median():.2g}",
               ylim=(max(nz.abs_Delta.min(), 1e-12) if len(nz) else 1e-12, None))
        ax.title.set_fontsize(9)
    axes[0, 0].set_ylabel("|Delta| = |log p' - log p|")
    # one legend for every panel, below them: it covers no point
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=7,
               markerscale=4, frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig, points.reset_index(drop=True)[["label", "p", "abs_Delta", "eps", "bound_exact",
                                               "bound_first"]]


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


# --- explorer (notebook 01) ----------------------------------------------------------------------

M3_EPS_RANGE = (1e-3, 2.0)
"""The logit mismatch sizes the M3 explorer covers (its eps slider and the right panel's axis)."""

M3_TAIL_FLOOR = 1e-8
"""Smallest ``1 - p`` drawn by the M3 explorer: below it float64 rounds ``1 - p`` away."""


def plot_m3_explorer(eps: float = 0.05, p: float = 0.5, n: int = 128, V: int = 32,
                     seed: int = 0):
    """M3 at one logit mismatch size ``eps`` and one trainer probability ``p``.

    Source: DVP (M2, M3). ``n`` random logit rows (:func:`tailtheory.softmax.scores.draw_logits`,
    from nearly uniform to extremely peaked) get a random perturbation ``delta`` uniform in
    ``[-eps, eps]^V``; every token's ``|Delta|`` (:func:`tailtheory.mismatch.real.mismatch_tokens`)
    lies under the exact bound at ``eps``. Left: ``|Delta|`` against ``1 - p`` with the exact,
    first-order and linear (M2) bounds. Right: the bounds at ``p`` against ``eps``. On both, the
    star is :func:`~tailtheory.mismatch.logprob.m3_witness` at ``(eps, p)``, which attains the
    exact bound; the square (right) the largest random ``|Delta|`` of tokens near ``p`` (``1 - p``
    within a factor 1.25).

    Returns ``(fig, df)``: one row per random token (``p``, ``abs_Delta``, ``eps_measured``, the
    per-position ``eps`` the perturbation used, and ``bound_exact`` at ``eps``).
    """
    import matplotlib.pyplot as plt


    eps, p = float(eps), float(p)
    g = torch.Generator().manual_seed(seed)
    z = draw_logits(n, V, g)                                                     # (n, V)
    delta = eps * (2 * torch.rand(n, V, generator=g, dtype=torch.float64) - 1)   # |delta| <= eps
    tok = {k: v.flatten() for k, v in mismatch_tokens(z[None], (z + delta)[None]).items()}
    df = pd.DataFrame({"p": tok["p"].numpy(), "abs_Delta": tok["abs_Delta"].numpy(),
                       "eps_measured": tok["eps"].numpy(),
                       "bound_exact": mm.mismatch_bound(tok["p"], eps, "exact").numpy()})
    w_p, w_delta = mm.m3_witness(p, eps, V)
    witness = float(mm.mismatch_identity(w_p, w_delta)[0].abs())
    q = 1 - df["p"]
    near = df[(q > (1 - p) / 1.25) & (q < (1 - p) * 1.25)]

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    shown = df[(q >= M3_TAIL_FLOOR) & (df["abs_Delta"] > 0)]
    a1.scatter(1 - shown["p"], shown["abs_Delta"], s=3, alpha=0.3, color="tab:blue",
               label=f"random delta in [-eps, eps]^{V} ({len(df)} tokens)")
    grid_q = np.logspace(np.log10(M3_TAIL_FLOOR), 0, 200)                     # 1 - p
    grid_eps = np.logspace(*np.log10(M3_EPS_RANGE), 200)
    for order, style, label in (("exact", "k-", "exact bound (M3)"),
                                ("first", "r--", "first order (M3)"),
                                ("linear", "b:", "2 eps (1-p) (M2, to O(eps^2))")):
        a1.plot(grid_q, mm.mismatch_bound(torch.from_numpy(1 - grid_q), eps, order).numpy(),
                style, lw=1, label=label)
        a2.plot(grid_eps, mm.mismatch_bound(p, torch.from_numpy(grid_eps), order).numpy(),
                style, lw=1, label=label)
    for ax, x in ((a1, max(1 - p, M3_TAIL_FLOOR)), (a2, eps)):
        ax.axvline(x, color="0.5", lw=0.8, ls=":")
        ax.plot([x], [witness], "*", color="tab:orange", ms=11, label="witness: attains it")
    if len(near):
        a2.plot([eps], [near["abs_Delta"].max()], "s", color="tab:blue", ms=6,
                label=f"largest random |Delta| near p ({len(near)} tokens)")
    a1.set(xscale="log", yscale="log", xlabel="1 - p (trainer)",
           ylabel="|Delta| = |log p' - log p|", title=f"every token at eps = {eps:.3g}")
    a1.set_ylim(max(float(shown["abs_Delta"].min()), 1e-14) if len(shown) else 1e-14,
                4 * max(eps, 1e-12))
    a2.set(xscale="log", yscale="log", xlabel="eps (logit mismatch, max |delta|)",
           title=f"bounds at p = {p:.3g}: exact {witness:.3g}")
    a1.legend(fontsize=6, loc="lower right")
    a2.legend(fontsize=6, loc="lower right")
    for ax in (a1, a2):
        fast_log_ticks(ax)
    fig.tight_layout()
    return fig, df


def explore_m3(n: int = 128, V: int = 32, seed: int = 0):
    """Notebook 01's explorer: sliders for ``eps`` and ``p`` over :func:`plot_m3_explorer`
    (:func:`tailtheory.core.explore.explorer`; the static figure at the defaults without a
    widget front end)."""
    from functools import partial


    return explorer(partial(plot_m3_explorer, n=n, V=V, seed=seed),
                    "M3: random perturbations (dots) stay under the exact bound, which the "
                    "witness (star) attains; M2's linear form falls below it as eps grows.",
                    eps=Control(0.05, *M3_EPS_RANGE, log=True, label="eps"),
                    p=Control(0.5, 0.0, 0.999, 0.001, label="p"))
