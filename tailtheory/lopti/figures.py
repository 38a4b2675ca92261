"""LOPTI's Figures 1 and 3 from the stored one-step measurement (claims L1, L4, L5).

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1 and Figure 3. The numbers are
:func:`tailtheory.lopti.measurement.seed_values` of a measurement (stored or new); each plot
returns ``(figure, table)`` for ``tailtheory.core.display.show_figure`` (notebook 04).
"""

from __future__ import annotations

import numpy as np

from tailtheory.lopti.measurement import seed_values
from tailtheory.lopti.onestep import ALPHA, ETA, METHODS, SGD_LR, UPDATE_BINS
from tailtheory.lopti.probes import N_BINS

BIN_LABELS = ("[0,.25]", "(.25,.5]", "(.5,.75]", "(.75,1]")
"""Tick labels of the bins."""


def summary_table(data: dict):
    """Long table ``seed, quantity, bin, value`` of :func:`seed_values` (bin ``all`` for the
    all-token gradient norm): the data behind both figures."""
    import pandas as pd

    rows = []
    for s, v in seed_values(data).items():
        per_bin = {"token_frac": v["frac"], "adv_mean_pos": v["adv_pos"],
                   "adv_mean_neg": v["adv_neg"], "grad_norm": v["norm_bins"],
                   "l1_param_norm": v["l1"]["param_bins"], "l1_logit_norm": v["l1"]["logit_bins"],
                   **{f"dpi_{u}_{g}": v["dpi"][u][g] for u in UPDATE_BINS for g in ("pos", "neg")},
                   **{f"rise_{m}": v["rise"][m] for m in METHODS}}
        rows += [{"seed": s, "quantity": q, "bin": BIN_LABELS[b], "value": float(x[b])}
                 for q, x in per_bin.items() for b in range(N_BINS)]
        rows.append({"seed": s, "quantity": "grad_norm", "bin": "all", "value": v["norm_all"]})
    return pd.DataFrame(rows)


def _bars(ax, df, quantities: dict, width: float = 0.8) -> None:
    """Grouped bars per bin: seed mean, error bars from the seed minimum to maximum."""
    k = len(quantities)
    for j, (q, label) in enumerate(quantities.items()):
        g = df[df["quantity"] == q].groupby("bin", sort=False)["value"]
        mean, lo, hi = (g.agg(f).reindex(BIN_LABELS).to_numpy() for f in ("mean", "min", "max"))
        x = np.arange(N_BINS) + (j - (k - 1) / 2) * width / k
        ax.bar(x, mean, width / k, label=label, color=f"C{j}",
               yerr=np.clip(np.stack([mean - lo, hi - mean]), 0, None), capsize=2)
    ax.set_xticks(range(N_BINS), BIN_LABELS, fontsize=7)
    ax.set_xlabel("pi_old bin")


def plot_figure1(data: dict, policy: str = "kk_trace warm start", paper: bool = False):
    """LOPTI Figure 1 analogue, 2 x 3 panels: (a) tokens per bin, (b) mean advantage, (c) / (e)
    / (f) mean ``Delta pi`` after a step on all / the lowest / the highest bin, (d) gradient norm
    per bin (dashed: all tokens). Bars: seed mean; error bars: seed min-max; ``policy`` names the
    probed policy in the title; ``paper``: panel (a) also marks LOPTI's own Figure 1(a) shares
    (:data:`tailtheory.lopti.probes.LOPTI_FIG1A`, black diamonds). Returns
    ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = summary_table(data)
    fig, ax = plt.subplots(2, 3, figsize=(12, 6.5))
    signs = lambda u: {f"dpi_{u}_pos": "A > 0", f"dpi_{u}_neg": "A < 0"}  # noqa: E731
    panels = [("(a) fraction of response tokens", {"token_frac": "tokens"}),
              ("(b) mean advantage", {"adv_mean_pos": "A > 0", "adv_mean_neg": "A < 0"}),
              ("(c) mean Delta pi, all bins updated", signs("all")),
              ("(d) ||grad L_b||, only bin b kept", {"grad_norm": "bin b"}),
              ("(e) mean Delta pi, lowest bin only", signs("lowest")),
              ("(f) mean Delta pi, highest bin only", signs("highest"))]
    for a, (title, qs) in zip(ax.flat, panels):
        _bars(a, df, qs)
        a.set_title(title, fontsize=9)
        a.legend(fontsize=7)
    ax[0, 0].set_yscale("log")
    if paper:
        from tailtheory.lopti.probes import LOPTI_FIG1A

        ax[0, 0].plot(range(len(LOPTI_FIG1A)), LOPTI_FIG1A, "kD", ms=5,
                      label="LOPTI Fig. 1(a), Qwen2.5-7B")
        ax[0, 0].legend(fontsize=7)
    g = df[(df["quantity"] == "grad_norm") & (df["bin"] == "all")]["value"]
    ax[1, 0].axhline(g.mean(), ls="--", color="k", label="all tokens")
    ax[1, 0].axhspan(g.min(), g.max(), color="k", alpha=0.1)
    ax[1, 0].legend(fontsize=7)
    lims = [a.get_ylim() for a in (ax[0, 2], ax[1, 1], ax[1, 2])]
    for a in (ax[0, 2], ax[1, 1], ax[1, 2]):  # one scale: (f) is small next to (c)
        a.set_ylim(min(lo for lo, _ in lims), max(hi for _, hi in lims))
        a.axhline(0, color="k", lw=0.5)
    fig.suptitle(f"LOPTI Fig. 1 analogue: {policy}, one SGD step (lr {SGD_LR}), "
                 f"{len(data['seeds'])} seeds", fontsize=10)
    fig.tight_layout()
    return fig, df[~df["quantity"].str.startswith(("rise_", "l1_"))].reset_index(drop=True)


def plot_figure3(data: dict):
    """LOPTI Figure 3 analogue: among ``A > 0`` tokens, the fraction whose probability rose,
    per bin, for GRPO, AR and Lopti (left; seed min-max), and the top bin seed by seed (right).
    Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = summary_table(data)
    df = df[df["quantity"].str.startswith("rise_")].reset_index(drop=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), width_ratios=(2, 1))
    _bars(left, df, {f"rise_{m}": m for m in METHODS})
    top = df[df["bin"] == BIN_LABELS[-1]]
    for j, m in enumerate(METHODS):
        ys = top[top["quantity"] == f"rise_{m}"]["value"]
        right.scatter([j] * len(ys), ys, color=f"C{j}", s=14)
        right.plot([j - 0.2, j + 0.2], [ys.mean()] * 2, color=f"C{j}")
    right.set_xticks(range(len(METHODS)), METHODS)
    right.set_title(f"top bin {BIN_LABELS[-1]}: seeds and mean", fontsize=9)
    left.set_title(f"fraction of A > 0 tokens whose pi rose (AR alpha {ALPHA}, Lopti eta {ETA})",
                   fontsize=9)
    for a in (left, right):
        a.axhline(0.5, ls="--", color="k", lw=0.8)
    left.legend(fontsize=7)
    fig.tight_layout()
    return fig, df
