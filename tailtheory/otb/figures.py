"""Figures of the optimal token baseline (OTB; claims O2, O3, O4, O6, O6 in training).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``. :func:`explore_otb` is notebook 03's
explorer (:mod:`tailtheory.core.explore`): sliders over :func:`plot_otb_explorer`, nothing saved.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tailtheory.core.explore import Control, explorer, fast_log_ticks
from tailtheory.core.tabular import TabularPolicy
from tailtheory.experiments.plot import curve_panels, seed_bands
from tailtheory.otb.experiments import proxy_table
from tailtheory.otb.variance import (baseline_variance, binary_rewards, exact_gradient, group_study,
                                     population_baselines)

BASELINE_LABELS = {"mean": "group mean E[R]", "otb": "OTB (proxy W_t)",
                   "token": "w_t-weighted mean", "zero": "no baseline"}
"""The population baselines drawn in the variance figure, by their name in
:func:`tailtheory.otb.variance.population_baselines`."""


def plot_baseline_variance(rows):
    """O3, O4: exact ``V(B) / V(M^-1 c)`` of each baseline against the policy's sharpness.

    ``rows`` from :func:`tailtheory.otb.variance.variance_sweep`; one panel per EOS setting,
    the median over seeds and horizons with its min-max band (seaborn on the long table).
    Returns ``(fig, df)``.
    """
    import matplotlib.pyplot as plt


    df = pd.DataFrame(list(rows))
    long = df.melt(id_vars=["V", "T", "eos", "sharpness", "seed"],
                   value_vars=[f"ratio_{k}" for k in BASELINE_LABELS],
                   var_name="baseline", value_name="V_over_Vopt")
    long["baseline"] = long["baseline"].str.removeprefix("ratio_")
    shown = long.assign(baseline=long["baseline"].map(BASELINE_LABELS))
    eos_values = sorted(long["eos"].unique())
    fig, axes = plt.subplots(1, len(eos_values), figsize=(5 * len(eos_values), 3.6),
                             squeeze=False, sharey=True)
    for ax, e in zip(axes[0], eos_values):
        seed_bands(shown[shown["eos"] == e], "sharpness", "V_over_Vopt", "baseline", ax,
                   order=BASELINE_LABELS.values(), legend=ax is axes[0][0], estimator="median",
                   alpha=0.15, marker="o")
        ax.set(xlabel="logit sharpness", ylabel="")
        ax.set_title("no EOS" if e < 0 else f"EOS = token {e}")
    # log scale only now: on a log axis seaborn would take the median of the logs
    axes[0][0].set_yscale("log")
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


# --- explorer (notebook 03) ----------------------------------------------------------------------

EXPLORER_NS = (2, 4, 8, 16, 32, 64)
"""Group sizes of the OTB explorer (its slider and the x axis)."""

EXPLORER_METHODS = {"dr_grpo": ("group mean (Dr. GRPO)", "tab:blue"),
                    "rloo": ("leave-one-out mean (RLOO)", "tab:green"),
                    "otb": ("OTB", "tab:orange")}
"""Finite-group methods the explorer samples, with their label and colour."""

EXPLORER_POPULATION = {"mean": ("group mean E[R]", "tab:blue", "-"),
                       "otb": ("OTB (proxy W_t)", "tab:orange", "-"),
                       "opt": ("optimum M^-1 c", "k", ":")}
"""Population baselines whose exact variance the explorer draws, with label, colour, style."""


def plot_otb_explorer(N: int = 8, sharpness: float = 2.0, V: int = 3, T: int = 4,
                      eos: int | None = 0, n_groups: int = 200, seed: int = 0):
    """O4 and O6 at one group size: OTB's variance against the group mean's.

    Source: OTB (O3, O4, O6). One random tabular policy (``V``, ``T``, ``eos``, ``sharpness``)
    with binary rewards (:func:`~tailtheory.otb.variance.binary_rewards`). Lines: the exact
    variance of each population baseline (:func:`~tailtheory.otb.variance.population_baselines`,
    :func:`~tailtheory.otb.variance.baseline_variance`) over ``N`` samples,
    ``V(B) / (N ||grad J||^2)``. Dots at ``N``: the relative MSE of ``n_groups`` sampled groups
    of ``N`` (:func:`~tailtheory.otb.variance.group_study`) for the group mean, RLOO and OTB.
    Returns ``(fig, df)``: columns ``source`` (``exact`` or ``groups``), ``baseline``, ``N``,
    ``rel_mse``.
    """
    import matplotlib.pyplot as plt


    N = int(N)
    pol = TabularPolicy.random(V, T, eos=eos, sharpness=float(sharpness), seed=seed)
    R = binary_rewards(pol, seed=seed)
    grad_sq = float(exact_gradient(pol, R).pow(2).sum())
    base = population_baselines(pol, R)
    var = {k: float(baseline_variance(pol, R, base[k])) for k in EXPLORER_POPULATION}
    Ns = np.array(EXPLORER_NS, dtype=float)
    rows = [{"source": "exact", "baseline": k, "N": int(n), "rel_mse": var[k] / (n * grad_sq)}
            for k in EXPLORER_POPULATION for n in Ns]
    groups = {r["method"]: r for r in group_study(pol, R, Ns=(N,), n_groups=n_groups,
                                                  methods=tuple(EXPLORER_METHODS), seed=seed)}
    rows += [{"source": "groups", "baseline": m, "N": N, "rel_mse": groups[m]["rel_mse"]}
             for m in EXPLORER_METHODS]
    df = pd.DataFrame(rows)

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for k, (label, color, ls) in EXPLORER_POPULATION.items():
        ax.plot(Ns, var[k] / (Ns * grad_sq), color=color, ls=ls, lw=1.2,
                label=f"exact V(B)/N, B = {label}")
    for m, (label, color) in EXPLORER_METHODS.items():
        ax.plot([N], [groups[m]["rel_mse"]], "o" if m != "rloo" else "s", color=color, ms=7,
                mfc="none" if m == "rloo" else color, label=f"{n_groups} groups: {label}")
    ax.axvline(N, color="0.5", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="group size N",
           ylabel="E||g_hat - grad J||^2 / ||grad J||^2")
    ax.set_title(f"V(OTB) / V(mean) = {var['otb'] / var['mean']:.3f} (exact); at N = {N}: "
                 f"OTB / group mean MSE = "
                 f"{groups['otb']['rel_mse'] / groups['dr_grpo']['rel_mse']:.3f}",
                 fontsize=9)
    ax.legend(fontsize=6, loc="lower left")
    fast_log_ticks(ax)
    ax.set_xticks(list(EXPLORER_NS), [str(n) for n in EXPLORER_NS])
    fig.tight_layout()
    return fig, df


def explore_otb():
    """Notebook 03's explorer: sliders for the group size ``N`` and the policy's sharpness over
    :func:`plot_otb_explorer` (:func:`tailtheory.core.explore.explorer`; the static figure at
    the defaults without a widget front end)."""
    return explorer(plot_otb_explorer,
                    "OTB against the group mean on one tabular policy (V = 3, T = 4, EOS token 0, "
                    "binary rewards): exact variances over N samples (lines) and sampled groups "
                    "of N (dots).",
                    N=Control(8, options=EXPLORER_NS, label="N"),
                    sharpness=Control(2.0, 0.25, 6.0, 0.25, label="sharpness"))


def o6_table(data: dict):
    """Long table ``label, seed, step, tokens (cumulative), metric, value`` of reward per step
    and held-out accuracy per evaluation."""
    import itertools

    import pandas as pd

    rows = []
    for label, runs in data.items():
        for r in runs:
            cum = [0, *itertools.accumulate(r["tokens"])]     # tokens consumed before each step
            rows += [{"label": label, "seed": r["seed"], "step": t, "tokens": cum[t + 1],
                      "metric": "reward", "value": v} for t, v in enumerate(r["reward"])]
            rows += [{"label": label, "seed": r["seed"], "step": t, "tokens": cum[t],
                      "metric": "held-out accuracy", "value": v}
                     for t, v in zip(r["eval_steps"], r["eval"])]
    return pd.DataFrame(rows)


def plot_o6(data: dict, smooth: int = 5):
    """Reward (running mean over ``smooth`` steps) and held-out accuracy against the tokens
    consumed, per configuration: mean over seeds (x: mean cumulative tokens of the step), band
    min-max (seaborn on the long table). Returns ``(figure, table)``."""
    df = o6_table(data)
    # every seed of a step at the step's mean token count, so the band is taken over seeds
    d = df.assign(**{"mean tokens": df.groupby(["label", "metric", "step"])["tokens"]
                     .transform("mean")})
    fig = curve_panels(d, ("reward", "held-out accuracy"), x="mean tokens", smooth=smooth,
                       lw=1.3, titles={"reward": f"reward (running mean of {smooth})"},
                       legend_title="mean; band: min-max over seeds")
    for ax in fig.axes:
        ax.set_xlabel("response tokens consumed")
    return fig, df


__all__ = ["o6_table", "plot_o6", "BASELINE_LABELS", "plot_baseline_variance", "proxy_table", "plot_proxy_vs_true",
           "plot_group_study", "EXPLORER_NS", "EXPLORER_METHODS", "EXPLORER_POPULATION",
           "plot_otb_explorer", "explore_otb"]
