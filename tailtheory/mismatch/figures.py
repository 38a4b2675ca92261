"""Figures of training-inference mismatch (DVP, TIM; claims M3-M7).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``.
Notebook 01 (``make repro``) writes them into ``figures/``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from tailtheory.mismatch import logprob as mm


def _points(trainer_logits, inference_logits, max_points: int, seed: int) -> pd.DataFrame:
    """A random subsample of tokens: p, |Delta|, eps and both M3 bounds."""
    Delta = mm.logprob_mismatch(trainer_logits, inference_logits).flatten()
    z = torch.as_tensor(trainer_logits, dtype=torch.float64)
    p = torch.softmax(z, -1)
    eps = mm.mismatch_eps(torch.as_tensor(inference_logits, dtype=torch.float64) - z, "position")
    eps = eps[..., None].expand_as(p).flatten()
    p = p.flatten()
    g = torch.Generator().manual_seed(seed)
    head = (p > 1e-2).nonzero()[:, 0]  # every head token: the (1-p) law lives there
    rest = (p <= 1e-2).nonzero()[:, 0]
    idx = torch.cat([head, rest[torch.randperm(len(rest), generator=g)[:max_points]]])
    return pd.DataFrame({"p": p[idx].numpy(), "abs_Delta": Delta[idx].abs().numpy(),
                         "eps": eps[idx].numpy(),
                         "bound_exact": mm.mismatch_bound(p[idx], eps[idx], "exact").numpy(),
                         "bound_first": mm.mismatch_bound(p[idx], eps[idx], "first").numpy()})


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


def selection_bias_table(sigma: float = 0.3, V: int = 64, n_contexts: int = 20_000,
                         n_bins: int = 10, seed: int = 0) -> pd.DataFrame:
    """Mean signed ``Delta`` of engine-sampled tokens per trainer-probability bin (M4, M5).

    Contexts have logits ``s N(0, I)`` with ``s`` from 0.3 to 8; the engine adds
    ``N(0, sigma^2)`` noise and samples one token per context. Columns: p_lo, p_hi, p_mid,
    count, mean_Delta, sem, m5 (M5's second-order prediction averaged over the bin).
    """
    g = torch.Generator().manual_seed(seed)
    s = 0.3 + 7.7 * torch.rand(n_contexts, 1, generator=g, dtype=torch.float64)
    z = s * torch.randn(n_contexts, V, generator=g, dtype=torch.float64)  # (N, V)
    delta = sigma * torch.randn(n_contexts, V, generator=g, dtype=torch.float64)
    k = torch.multinomial(torch.softmax(z + delta, -1), 1, generator=g)  # (N, 1)
    p = torch.softmax(z, -1)
    Delta = mm.logprob_mismatch(z, z + delta).gather(-1, k)[:, 0]
    m5 = mm.sampled_bias_second_order(p, sigma).gather(-1, k)[:, 0]
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


MIN_ALIVE = 30
"""Positions where fewer sequences of a group are still running are left out of its curve."""


def plot_accumulation(sigma: float = 0.3, B: int = 600, T_max: int = 96, V: int = 32,
                      seed: int = 0):
    """Cumulative ``log pi_train / pi_infer`` along sequences with many vs few tail tokens (M6).

    Source: DVP (M6). Simulated with :func:`tailtheory.mismatch.logprob.simulate_sequences`; sequences
    are split at the quartiles of their tail fraction. The dotted curves are ``±sigma sqrt(t)``,
    the scale of a zero-mean random walk. Returns ``(fig, df)`` with columns t, group, mean, sd.
    """
    import matplotlib.pyplot as plt

    sim = mm.simulate_sequences(B, T_max, V, sigma, seed)
    tail = (sim["p_tok"] < mm.TAIL_P).double()
    frac = tail[:, : T_max // 8].mean(-1)  # every sequence is at least T_max/8 long
    cum = -torch.cumsum(sim["Delta_tok"], -1)  # (B, T): log pi_train / pi_infer up to t
    cum = torch.where(sim["mask"], cum, torch.nan).numpy()  # ended sequences leave the mean
    lo, hi = torch.quantile(frac, 0.25), torch.quantile(frac, 0.75)
    rows = []
    fig, ax = plt.subplots(figsize=(5, 3.6))
    t = np.arange(1, T_max + 1)
    for name, sel in (("many tail tokens", frac >= hi), ("few tail tokens", frac <= lo)):
        alive = (~np.isnan(cum[sel.numpy()])).sum(0) >= MIN_ALIVE
        mean = np.where(alive, np.nanmean(cum[sel.numpy()], 0), np.nan)
        sd = np.where(alive, np.nanstd(cum[sel.numpy()], 0), np.nan)
        ax.plot(t, mean, label=name)
        ax.fill_between(t, mean - sd, mean + sd, alpha=0.2)
        rows.append(pd.DataFrame({"t": t, "group": name, "mean": mean, "sd": sd}))
    ax.plot(t, sigma * np.sqrt(t), "k:", lw=1, label="± sigma sqrt(t)")
    ax.plot(t, -sigma * np.sqrt(t), "k:", lw=1)
    ax.set(xlabel="position t", ylabel="cumulative log pi_train / pi_infer",
           title=f"accumulation, sigma = {sigma:g}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, pd.concat(rows, ignore_index=True)
