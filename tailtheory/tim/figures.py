"""Tables and figures of the mismatch-in-training measurement (V3, V4, V5), from the numbers
the study ``tailtheory.tim.training.STUDY`` stores: each ``plot_*`` returns ``(figure,
table)`` with the table the figure is drawn from.
"""

from __future__ import annotations

from tailtheory.tim.training import C_EDGES, STUDY


def _runs(data) -> list[str]:
    """The main and knob arms (not the remedies, which re-read or add runs)."""
    m = STUDY.measurement(data)
    return m.labels(role="main") + m.labels(role="knob")


def contribution_table(data: dict, labels=None):
    """Long table ``label, sign, lo, hi, count, share`` of the histograms of ``C`` pooled over
    seeds (``labels``: default every run with a token dump)."""
    import pandas as pd

    labels = labels or [lb for lb in _runs(data) if "v3" in data[lb][0]]
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


def final_table(data: dict, labels=None):
    """Table ``label, seed, final_reward, final_eval, first_reward`` (one row per run)."""
    import pandas as pd

    labels = labels or list(data)
    return pd.DataFrame([{"label": lb, "seed": r["seed"], "final_reward": r["final_reward"],
                          "final_eval": r["final_eval"], "first_reward": r["first_reward"]}
                         for lb in labels for r in data[lb]])


def plot_finals(data: dict, labels=None):
    """Final reward (last 10 steps) and held-out accuracy per configuration: dots are seeds,
    bars their mean. Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = final_table(data, labels)
    order = list(dict.fromkeys(df["label"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.35 * len(order) + 1.6))
    for ax, key in zip(axes, ("final_reward", "final_eval")):
        means = df.groupby("label", sort=False)[key].mean().reindex(order)
        ax.barh(range(len(order)), means, color="C0", alpha=0.35)
        for i, label in enumerate(order):
            ys = df[df["label"] == label][key]
            ax.scatter(ys, [i] * len(ys), color="C0", s=12)
        ax.set_yticks(range(len(order)), order, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(key.replace("_", " ").replace("eval", "held-out accuracy"))
    fig.tight_layout()
    return fig, df


def kl_table(data: dict, labels=None):
    """Long table ``label, seed, step, reward, k1, k3, abs_mean`` of the mismatch runs."""
    import pandas as pd

    m = STUDY.measurement(data)
    labels = labels or [lb for lb in _runs(m) if m.tags[lb]["path"] != "exact"]
    return pd.DataFrame([{"label": lb, "seed": r["seed"], "step": t,
                          **{k: r[k][t] for k in ("reward", "k1", "k3", "abs_mean")}}
                         for lb in labels for r in data[lb] for t in range(len(r["reward"]))])


def plot_kl_reward(data: dict, labels=None, smooth: int = 5):
    """V5: per step the k3 and k1 mismatch KL and the reward (running mean over ``smooth``
    steps) of each mismatch configuration, mean over seeds. Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = kl_table(data, labels)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for label, d in df.groupby("label", sort=False):
        g = d.groupby("step")
        for ax, key in zip(axes, ("k3", "k1", "reward")):
            y = g[key].mean()
            if key == "reward":
                y = y.rolling(smooth, min_periods=1).mean()
            ax.plot(y.index, y, label=label, lw=1.2)
    for ax, title in zip(axes, ("mean k3 = rho - 1 - log rho", "mean k1 = -log rho",
                                f"reward (running mean of {smooth})")):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    axes[0].set_yscale("log")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    return fig, df


def harm_frame(data: dict):
    """:func:`tailtheory.tim.training.harm_table` as a table (one row per configuration)."""
    import pandas as pd

    from tailtheory.tim.training import harm_table

    return pd.DataFrame(harm_table(data))
