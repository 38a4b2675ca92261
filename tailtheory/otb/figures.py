"""Figures of the optimal token baseline (OTB; claims O2, O3, O4, O6).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``.
"""

from __future__ import annotations

import pandas as pd

from tailtheory.otb.experiments import proxy_table

BASELINE_LABELS = {"mean": "group mean E[R]", "otb": "OTB (proxy W_t)",
                   "token": "w_t-weighted mean", "zero": "no baseline"}
"""The population baselines drawn in the variance figure, by their name in
:func:`tailtheory.otb.variance.population_baselines`."""


def plot_baseline_variance(rows):
    """O3, O4: exact ``V(B) / V(M^-1 c)`` of each baseline against the policy's sharpness.

    ``rows`` from :func:`tailtheory.otb.variance.variance_sweep`; one panel per EOS setting,
    the median over seeds and horizons with its min-max band. Returns ``(fig, df)``.
    """
    import matplotlib.pyplot as plt

    df = pd.DataFrame(list(rows))
    long = df.melt(id_vars=["V", "T", "eos", "sharpness", "seed"],
                   value_vars=[f"ratio_{k}" for k in BASELINE_LABELS],
                   var_name="baseline", value_name="V_over_Vopt")
    long["baseline"] = long["baseline"].str.removeprefix("ratio_")
    eos_values = sorted(long["eos"].unique())
    fig, axes = plt.subplots(1, len(eos_values), figsize=(5 * len(eos_values), 3.6),
                             squeeze=False, sharey=True)
    for ax, e in zip(axes[0], eos_values):
        for name, label in BASELINE_LABELS.items():
            g = long[(long["eos"] == e) & (long["baseline"] == name)].groupby("sharpness")
            stats = g["V_over_Vopt"].agg(["median", "min", "max"])
            ax.plot(stats.index, stats["median"], marker="o", label=label)
            ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.15)
        ax.set_yscale("log")
        ax.set_xlabel("logit sharpness")
        ax.set_title("no EOS" if e < 0 else f"EOS = token {e}")
    axes[0][0].set_ylabel("V(B) / V(M^-1 c)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig, long


def plot_proxy_vs_true(**kwargs):
    """O2: scatter of ``W_t`` against ``||S_<=t||^2``; tabular points sit on the diagonal.

    ``kwargs`` go to :func:`tailtheory.otb.experiments.proxy_table`. Returns ``(fig, df)``.
    """
    import matplotlib.pyplot as plt

    df = proxy_table(**kwargs)
    fig, ax = plt.subplots(figsize=(4.4, 4))
    for name, g in df.groupby("parameters"):
        ax.scatter(g["W_proxy"], g["true_prefix_sq_norm"], s=10, alpha=0.6, label=name)
    top = float(df[["W_proxy", "true_prefix_sq_norm"]].max().max())
    ax.plot([0, top], [0, top], color="k", lw=0.8, ls="--")
    ax.set_xlabel("proxy W_t = sum_j (1 - 2 pi_j + sum p^2)")
    ax.set_ylabel("true ||S_<=t||^2")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, df


def plot_group_study(rows, reference=("grpo", 32)):
    """O6: cosine to the exact gradient and relative MSE against the group size, per method.

    ``rows`` from :func:`tailtheory.otb.variance.group_sweep`; the dotted line is the
    reference method's cosine at its group size. Returns ``(fig, df)``.
    """
    import matplotlib.pyplot as plt

    df = pd.DataFrame(list(rows))
    ref = df[(df["method"] == reference[0]) & (df["N"] == reference[1])]["cosine"].iloc[0]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    for m, g in df.groupby("method"):
        g = g.sort_values("N")
        a1.errorbar(g["N"], g["cosine"], yerr=2 * g["cosine_se"], marker="o", label=m,
                    capsize=2)
        a2.plot(g["N"], g["rel_mse"], marker="o", label=m)
    a1.axhline(ref, color="k", ls=":", lw=1, label=f"{reference[0]} at N={reference[1]}")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("group size N")
    a1.set_ylabel("E cos(g_hat, grad J)")
    a2.set_yscale("log")
    a2.set_ylabel("E||g_hat - grad J||^2 / ||grad J||^2")
    a1.legend(fontsize=8)
    fig.tight_layout()
    return fig, df


__all__ = ["BASELINE_LABELS", "plot_baseline_variance", "proxy_table", "plot_proxy_vs_true",
           "plot_group_study"]
