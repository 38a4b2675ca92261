"""Figures of vocabulary pruning (DVP; claim P4).

``plot_pruning_tradeoff`` returns ``(fig, df)`` for ``tailtheory.core.io.save_figure(fig, name,
data=df)``; notebook 01 (``make repro``) writes it into ``figures/``.
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
