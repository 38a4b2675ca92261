"""Figures of vocabulary pruning (DVP; claim P4).

Each plot returns ``(fig, df)`` for ``tailtheory.core.io.save_figure(fig, name, data=df)``:
``plot_pruning_tradeoff`` (the random model's sweep; notebook 01, ``make repro``) and, from the
stored trained-model measurement of :mod:`tailtheory.pruning.trained_tails`,
``plot_trained_sweep`` and ``plot_mass_shares`` (notebook 05).
"""

from __future__ import annotations

import pandas as pd

LEFT_COLUMNS = ("seq_kl", "abs_delta_mean", "abs_delta_max")
"""Mismatch measures drawn as the fraction left after pruning (1 = nothing removed)."""


def plot_pruning_tradeoff(sweep: pd.DataFrame, mass_negligible: float | None = 1e-3):
    """P4: pruned mass (P2's bias bound) and the mismatch left after pruning, against ``rho``.

    Source: DVP (P4). ``sweep`` is :func:`tailtheory.pruning.sweep.pruning_sweep`'s table (its first
    row ``rho = 0`` is the unpruned reference). Left: the mean pruned mass per token and the
    per-sequence bound ``sum_t m`` against ``rho``; right: the fraction of each mismatch measure
    left, against the mean pruned mass (a knee would sit in the lower left).
    Returns ``(fig, df)``: ``sweep`` plus ``*_left`` columns.
    """
    import matplotlib.pyplot as plt

    if "rho" not in sweep or float(sweep.rho.iloc[0]) != 0.0:
        raise ValueError("sweep must be pruning_sweep's table, whose first row is rho = 0")
    ref = sweep.iloc[0]
    df = sweep.copy()
    for c in LEFT_COLUMNS:
        df[f"{c}_left"] = df[c] / ref[c] if ref[c] > 0 else float("nan")
    d = df[df.rho > 0]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax0.plot(d.rho, d.mass_mean, "o-", ms=3, label="mean pruned mass m per token")
    ax0.plot(d.rho, d.seq_mass, "s--", ms=3, label="P2 bound sum_t m per sequence")
    ax0.set(xscale="log", yscale="log", xlabel="rho (min-p)", ylabel="pruned mass",
            title="price: bias bound of P2")
    ax0.legend(fontsize=7)
    pos = d[d.mass_mean > 0]
    for c, mk in zip(LEFT_COLUMNS, "o^s"):
        ax1.plot(pos.mass_mean, pos[f"{c}_left"], mk + "-", ms=3, label=c.replace("_", " "))
    if mass_negligible is not None:
        ax1.axvline(mass_negligible, color="0.5", ls=":", lw=1, label="negligible mass")
    ax1.axhline(0.5, color="k", lw=0.5)
    ax1.set(xscale="log", xlabel="mean pruned mass per token", ylabel="fraction of mismatch left",
            ylim=(0, 1.1), title="gain: mismatch left after pruning both sides")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    return fig, df


SETTING_LABELS = {"random": "random model, head x40 (M7)",
                  "corpus_text": "corpus LM, held-out text",
                  "corpus_rollout": "corpus LM, own samples",
                  "policy_rollout": "K&K policy, own samples",
                  "matched_warm": "matched warm start, own samples",
                  "matched_mid": "matched GRPO step 60, own samples"}
"""Legend labels of the settings in the figures."""


def trained_sweep_table(data: dict, random_sweep=None):
    """Long table of every setting's sweep: ``setting, rho, mass_mean, seq_kl_left`` (exact, fixed
    contexts) and, for rollout settings, ``tok_abs_mean_left`` and ``tok_outlier_<tau>`` (sampled
    tokens of the rollout pruned at ``rho``). ``random_sweep``: P4's random-model table, added as
    setting ``random``."""
    parts = {name: s for name, s in data["settings"].items()}
    if random_sweep is not None:
        parts = {"random": {"sweep": pd.DataFrame(random_sweep).to_dict("records")}, **parts}
    rows = []
    for name, s in parts.items():
        df = pd.DataFrame(s["sweep"])
        df = df.assign(setting=name, seq_kl_left=df.seq_kl / df.seq_kl.iloc[0])
        if "sampled" in s:
            sm = pd.DataFrame(s["sampled"])
            cols = ["rho", "tok_abs_mean", *[c for c in sm if c.startswith("tok_outlier_")]]
            sm = sm[cols].assign(tok_abs_mean_left=sm.tok_abs_mean / sm.tok_abs_mean.iloc[0])
            df = df.merge(sm, on="rho", how="left")
        rows.append(df)
    return pd.concat(rows, ignore_index=True)


def plot_trained_sweep(data: dict, random_sweep=None, mass_negligible: float = 1e-3):
    """P4 on trained models against ``rho``: full-distribution sequence KL left, sampled-token
    mean ``|Delta|`` left, sampled outlier rates, pruned mass. Returns ``(figure, table)``
    (:func:`trained_sweep_table`)."""
    import matplotlib.pyplot as plt

    df = trained_sweep_table(data, random_sweep)
    d = df[df.rho > 0]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    taus = [c for c in df if c.startswith("tok_outlier_")]
    for i, (name, g) in enumerate(d.groupby("setting", sort=False)):
        kw = dict(color=f"C{i}", ms=3, label=SETTING_LABELS.get(name, name))
        axes[0].plot(g.rho, g.seq_kl_left, "o-", **kw)
        axes[3].plot(g.rho, g.mass_mean, "o-", **kw)
        if "tok_abs_mean_left" in g and g.tok_abs_mean_left.notna().any():
            axes[1].plot(g.rho, g.tok_abs_mean_left, "o-", **kw)
            for t, ls in zip(taus, ("-", "--", ":")):
                axes[2].plot(g.rho, g[t], ls, marker="o", color=f"C{i}", ms=3,
                             label=f"{kw['label']}, tau = {t.split('_')[-1]}")
    axes[0].axhline(0.5, color="k", lw=0.5)
    axes[3].axhline(mass_negligible, color="0.5", ls=":", lw=1, label="negligible mass")
    titles = ("sequence KL left (exact)", "sampled mean |Delta| left", "sampled P(|Delta| > tau)",
              "mean pruned mass per token")
    for ax, title in zip(axes, titles):
        ax.set(xscale="log", xlabel="rho (min-p)", title=title)
        ax.legend(fontsize=6)
    axes[2].set_yscale("log", nonpositive="mask")     # a rate of 0 is left out
    axes[3].set_yscale("log")
    fig.tight_layout()
    return fig, df


def shares_table(data: dict):
    """Long table of every setting's :func:`mass_shares` (exact) and, for rollout settings, the
    sampled-token shares: ``setting, p_lo, p_hi, mass_share, abs_share, kl_share,
    sampled_token_share, sampled_abs_share``."""
    rows = []
    for name, s in data["settings"].items():
        df = pd.DataFrame(s["shares"]).assign(setting=name)
        if "sampled_shares" in s:
            sm = pd.DataFrame(s["sampled_shares"]).rename(
                columns={"token_share": "sampled_token_share", "abs_share": "sampled_abs_share"})
            df = df.merge(sm, on=["p_lo", "p_hi"], how="left")
        rows.append(df)
    return pd.concat(rows, ignore_index=True)


def plot_mass_shares(data: dict):
    """Is the mismatch spread over tokens in proportion to sampled mass? Per setting and bin of the
    trainer's ``p``: shares of sampler mass, of ``E|Delta|`` and of the KL (bars), and of sampled
    tokens' summed ``|Delta|`` (dots). Returns ``(figure, table)`` (:func:`shares_table`)."""
    import matplotlib.pyplot as plt
    import numpy as np

    df = shares_table(data)
    names = list(dict.fromkeys(df.setting))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        g = df[df.setting == name].reset_index(drop=True)
        x = np.arange(len(g))
        for j, (c, lab) in enumerate((("mass_share", "sampler mass"), ("abs_share", "E|Delta|"),
                                      ("kl_share", "KL"))):
            ax.bar(x + (j - 1) * 0.27, g[c], width=0.27, label=lab)
        if "sampled_abs_share" in g:
            ax.plot(x, g.sampled_abs_share, "k.", label="sampled tokens' |Delta|")
        ax.set_xticks(x, [f"<{h:g}" for h in g.p_hi], rotation=45, fontsize=7)
        ax.set(xlabel="trainer p of the token", ylabel="share", ylim=(0, 1),
               title=SETTING_LABELS.get(name, name))
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig, df
