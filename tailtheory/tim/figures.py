"""V3's table and figure, from the numbers the study ``tailtheory.tim.training.STUDY`` stores:
``plot_contribution`` returns ``(figure, table)`` with the table the figure is drawn from.
"""

from __future__ import annotations

from tailtheory.tim.training import C_EDGES, STUDY


def contribution_table(data: dict, labels=None):
    """Long table ``label, sign, lo, hi, count, share`` of the histograms of ``C`` pooled over
    seeds (``labels``: default every run with a token dump)."""
    import pandas as pd

    labels = labels or [lb for lb in STUDY.measurement(data) if "v3" in data[lb][0]]
    out = []
    for label in labels:
        for sign in ("pos", "neg"):
            counts = [sum(r["v3"][sign]["hist"][i] for r in data[label])
                      for i in range(len(C_EDGES) - 1)]
            total = sum(counts) or 1
            out += [{"label": label, "sign": "A > 0" if sign == "pos" else "A < 0",
                     "lo": C_EDGES[i], "hi": C_EDGES[i + 1], "count": n, "share": n / total}
                    for i, n in enumerate(counts)]
    return pd.DataFrame(out)


def plot_contribution(data: dict, labels=None):
    """V3: the distribution of ``C = -(r - 1) A`` by sign of ``A``, one panel per run group
    (bins logarithmic in ``|C|``, the bin ``[0, 1e-6)`` holding the exact zeros).
    Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = contribution_table(data, labels)
    groups = list(dict.fromkeys(df["label"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(3.6 * len(groups), 3.4), squeeze=False)
    names = [f"{lo:g}" for lo in C_EDGES[:-1]]
    for ax, label in zip(axes[0], groups):
        for k, (sign, g) in enumerate(df[df["label"] == label].groupby("sign", sort=False)):
            ax.bar([i + 0.4 * k for i in range(len(g))], g["share"], width=0.4, label=sign)
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("C bin (lower edge)", fontsize=8)
    axes[0][0].set_ylabel("share of tokens")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig, df
