"""Figures of TRM's trust-region analysis (claims T1-T8, T12, T13).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tailtheory.trm import experiments as tx

BOUND_STYLE = {
    "classical": ("T1 classical", "k", "-"), "pm_kl": ("T2 PM-KL", "tab:blue", "-"),
    "pm_tv": ("T3 PM-TV", "tab:blue", ":"), "mix_kl": ("T4 Mixed-KL", "tab:green", "-"),
    "mix_tv": ("T5 Mixed-TV", "tab:green", ":"), "coupling": ("T6 coupling", "tab:purple", "-"),
    "adaptive": ("T7 adaptive", "tab:orange", "-"), "unified": ("T8 unified", "tab:red", "--"),
}
"""Label, colour and line style of each bound in the figures."""

PAPER_REGIMES = {
    "dense: delta=1e-3 every step": {"delta": 1e-3},
    "sparse: delta=0.5, D^seq_KL=1e-3 per step": {"delta": 0.5, "seq_kl_per_step": 1e-3,
                                                  "eps": 0.3},
}
"""Regimes for the bounds-against-T figure: a uniform small per-step KL (Pinsker-marginal wins)
and a large worst-context KL with a tiny average (the Mixed bound wins)."""


def plot_bounds_vs_T(Ts=None, regimes=None):
    """T1-T8 against ``T`` (log-log) for each regime of :data:`PAPER_REGIMES`."""
    import matplotlib.pyplot as plt

    Ts = np.unique(np.logspace(np.log10(2), 4, 40).astype(int)) if Ts is None else Ts
    regimes = PAPER_REGIMES if regimes is None else regimes
    df = tx.bounds_vs_T([int(t) for t in Ts], regimes)
    fig, axes = plt.subplots(1, len(regimes), figsize=(5 * len(regimes), 3.8), squeeze=False)
    for ax, (name, part) in zip(axes[0], df.groupby("regime", sort=False)):
        for key, g in part.groupby("bound", sort=False):
            label, color, ls = BOUND_STYLE[key]
            ax.loglog(g["T"], g["value"], color=color, ls=ls, label=label)
        ax.set(title=name, xlabel="horizon T", ylabel="bound on |Error|")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig, df


def plot_error_vs_bounds(df: pd.DataFrame):
    """Exact ``|Error|`` (worst-case reward, mean over seeds) beside every bound, against ``T``.

    ``df`` is :func:`tailtheory.trm.experiments.error_vs_T`'s output.
    """
    import matplotlib.pyplot as plt

    mean = df.groupby("T").mean(numeric_only=True).reset_index()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for key, (label, color, ls) in BOUND_STYLE.items():
        ax.loglog(mean["T"], mean[f"bound/{key}"], color=color, ls=ls, label=label)
    ax.loglog(mean["T"], mean["abs_error"], "ko-", ms=4, label="exact |Error|")
    ax.loglog(mean["T"], mean["half/unified"], color="tab:red", ls=":", lw=1,
              label="T8 halved (T10)")
    ax.set(xlabel="horizon T", ylabel="|Error| and its bounds",
           title="tabular pairs: exact error vs bounds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, mean


def plot_acceptance(qs=(0.001, 0.005, 0.02), Ts=(1, 4, 16, 64, 256, 1024), B: int = 4000,
                    seed: int = 0):
    """T12 length bias: TRM's acceptance rate against ``T``, ``(1-q)^T`` and simulation."""
    import matplotlib.pyplot as plt

    df = tx.acceptance_table(qs, Ts, B, seed=seed)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for q, g in df.groupby("q"):
        line = ax.semilogx(g["T"], g["theory"], label=f"(1-q)^T, q={q:g}")[0]
        ax.semilogx(g["T"], g["simulated"], "o", color=line.get_color(), ms=4)
    ax.set(xlabel="sequence length T", ylabel="P(accept)",
           title="max-filter acceptance (dots: simulation)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, df


__all__ = ["BOUND_STYLE", "PAPER_REGIMES", "plot_bounds_vs_T", "plot_error_vs_bounds",
           "plot_acceptance"]
