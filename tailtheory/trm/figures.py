"""Figures of TRM's trust-region analysis (claims T1-T8, T12, T13) and of masking in training (T14).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``. :func:`explore_trm` is notebook 02's
explorer (:mod:`tailtheory.core.explore`): sliders over :func:`plot_trm_explorer`, nothing saved.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tailtheory.core.explore import Control, explorer, fast_log_ticks
from tailtheory.trm import experiments as tx
from tailtheory.trm.training import length_acceptance_table

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


# --- explorer (notebook 02) ----------------------------------------------------------------------

EXPLORER_T_MAX = 12
"""Longest horizon of the TRM explorer: ``2^12`` sequences enumerated, a redraw stays cheap."""


def plot_trm_explorer(T: int = 8, delta: float = 0.01):
    """T1-T8 and the exact ``|Error|`` of one tabular pair at horizon ``T`` and per-step KL
    ``delta``.

    Source: TRM (T1-T8, T10, T13). The pair is :func:`~tailtheory.trm.experiments.uniform_kl_pair`
    (``V = 2``, ``KL(pi_roll || pi_theta) = delta`` in every context), scored with the
    worst-case reward; :func:`~tailtheory.trm.experiments.uniform_kl_table` gives every horizon
    from 2 to ``T``. Left: ``|Error|`` and each bound against the horizon. Right: their values
    at ``T``. Returns ``(fig, df)`` with the table's rows.
    """
    import matplotlib.pyplot as plt


    T = int(T)
    if not 2 <= T <= EXPLORER_T_MAX:
        raise ValueError(f"T must lie in [2, {EXPLORER_T_MAX}], got {T}")
    df = tx.uniform_kl_table(range(2, T + 1), float(delta))
    last = df.iloc[-1]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8), width_ratios=(1.2, 1))
    names, values, colors = [], [], []
    for key, (label, color, ls) in BOUND_STYLE.items():
        a1.loglog(df["T"], df[f"bound/{key}"], color=color, ls=ls, label=label)
        names.append(label)
        values.append(last[f"bound/{key}"])
        colors.append(color)
    a1.loglog(df["T"], df["half/unified"], color="tab:red", ls=":", lw=1,
              label="T8 halved (T10)")
    a1.loglog(df["T"], df["abs_error"], "ko-", ms=4, label="exact |Error|")
    a1.axvline(T, color="0.5", lw=0.8, ls=":")
    a1.set(xlabel="horizon T", ylabel="|Error| and its bounds",
           title=f"delta = {delta:.3g} per step (eps = {last['eps']:.3g})")
    a1.legend(fontsize=6, loc="upper left")
    names += ["T8 halved (T10)", "exact |Error|"]
    values += [last["half/unified"], last["abs_error"]]
    colors += ["tab:red", "k"]
    y = np.arange(len(names))[::-1]
    a2.barh(y, values, color=colors, alpha=0.7)
    for yi, v in zip(y, values):
        a2.text(v, yi, f" {v:.3g}", va="center", fontsize=7)
    a2.set_yticks(y, names, fontsize=7)
    a2.set_xscale("log")
    a2.set_xlim(min(v for v in values if v > 0) / 3, max(values) * 8)
    ratio = last["abs_error"] / last["bound/unified"]
    a2.set_title(f"at T = {T}: |Error| is {ratio:.1%} of T8 ({last['tightest']} tightest)",
                 fontsize=9)
    for ax in (a1, a2):
        fast_log_ticks(ax)
    ticks = sorted({t for t in (2, 4, 8) if t <= T / 1.3} | {T})
    a1.set_xticks(ticks, [str(t) for t in ticks])
    fig.tight_layout()
    return fig, df


def explore_trm():
    """Notebook 02's explorer: sliders for ``T`` and ``delta`` over :func:`plot_trm_explorer`
    (:func:`tailtheory.core.explore.explorer`; the static figure at the defaults without a
    widget front end)."""
    return explorer(plot_trm_explorer,
                    "TRM: one tabular pair with the same per-step KL in every context; the exact "
                    "error (worst-case reward) under every bound, T8 the smallest of T2-T7.",
                    T=Control(8, 2, EXPLORER_T_MAX, 1, label="T"),
                    delta=Control(0.01, 1e-4, 1.0, log=True, label="delta"))


def plot_length_acceptance(data, labels=None):
    """T14: fraction of sequences TRM keeps per response-length bin (dots) against the mean
    ``(1 - q)^T`` of the bin with the run's rate (solid lines) and with the bin's own rate
    (dashed), one panel per ``k2`` threshold. Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt


    df = length_acceptance_table(data, labels)
    deltas = sorted(df["delta"].unique(), reverse=True)
    n_max = max(int(df["n"].max()), 1) if len(df) else 1     # dot area grows with the bin's size
    fig, axes = plt.subplots(1, len(deltas), figsize=(4 * len(deltas), 3.4), squeeze=False)
    for ax, delta in zip(axes[0], deltas):
        for k, (label, g) in enumerate(df[df["delta"] == delta].groupby("label", sort=False)):
            mid = (g["lo"] + g["hi"].clip(upper=g["lo"].max() + 50)) / 2
            ax.plot(mid, g["predicted"], color=f"C{k}", lw=1)
            ax.plot(mid, g["predicted_bin_q"], color=f"C{k}", lw=1, ls="--")
            ax.scatter(mid, g["kept"], color=f"C{k}", s=8 + 40 * (g["n"] / n_max) ** 0.5,
                       label=f"{label} (q = {g['q'].iloc[0]:.2g})")
        ax.set_title(f"k2 > {delta:g}: kept (dots), (1-q)^T (solid; dashed: bin's own q)",
                     fontsize=8)
        ax.set_xlabel("response length (bin centre)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=6, markerscale=0.6)
    axes[0][0].set_ylabel("fraction kept (dot size: bin size)")
    fig.tight_layout()
    return fig, df


__all__ = ["BOUND_STYLE", "PAPER_REGIMES", "plot_bounds_vs_T", "plot_error_vs_bounds",
           "plot_acceptance", "plot_length_acceptance", "EXPLORER_T_MAX", "plot_trm_explorer",
           "explore_trm"]
