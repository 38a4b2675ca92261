"""What a decisiveness measurement shows: LOPTI's bins split into decisive and free tokens.

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1(a), (b) and (d), each bar split by
:mod:`tailtheory.lopti.decisive.branches` (``D >= tau`` decisive, else free). The input is
:func:`tailtheory.lopti.decisive.probe.measure_decisiveness`'s output (one policy); tokens carry
their stratum weight, so every share and mean here is the weighted estimate for all response
tokens of the probed prompts. Each plot returns ``(figure, table)`` for
``tailtheory.core.display.show_figure``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tailtheory.engine.tasks.knights_knaves import ROLES
from tailtheory.lopti.figures import BIN_LABELS
from tailtheory.lopti.probes import N_BINS

FORMAT_BREAKING = ("junk",)
"""Roles counted apart: tokens the task never writes (format-breaking)."""


def token_table(data: dict, tau: float) -> pd.DataFrame:
    """One row per probed token, with ``decisive`` (``D >= tau``) and ``sign`` (+1 when the
    token raised the expected reward by at least ``tau``, -1 when it lowered it, 0 if free)."""
    df = pd.DataFrame(data["tokens"])
    if df.empty:
        return df
    df["decisive"] = df["D"] >= tau
    df["sign"] = np.where(df["effect"] >= tau, 1, np.where(df["effect"] <= -tau, -1, 0))
    return df


def bin_summary(data: dict, tau: float) -> pd.DataFrame:
    """Per bin (and ``all``): ``token_frac`` (share of all response tokens), ``decisive_share``
    (weighted share of the bin's tokens that are decisive), ``helps`` / ``hurts`` (shares of the
    decisive ones that raise / lower E[R]), ``format_breaking`` (share of the bin's tokens the
    task never writes), mean signed advantage of its decisive and free tokens, mean ``D``, and
    with stored gradients ``norm_bin``, ``norm_decisive``, ``norm_free`` (Figure 1(d) split,
    mean over batches)."""
    df = token_table(data, tau)
    total = sum(sum(b["count"]) for b in data["batches"])
    rows = []
    for b, label in [*enumerate(BIN_LABELS), (None, "all")]:
        part = df if b is None else df[df["bin"] == b]
        w = part["weight"]
        dec = part[part["decisive"]]
        row = {"bin": label, "probed": len(part),
               "token_frac": (sum(sum(x["count"]) for x in data["batches"]) if b is None else
                              sum(x["count"][b] for x in data["batches"])) / max(total, 1),
               "decisive_share": _wmean(part["decisive"], w),
               "helps": _wmean(dec["sign"] > 0, dec["weight"]),
               "hurts": _wmean(dec["sign"] < 0, dec["weight"]),
               "format_breaking": _wmean(part["role"].isin(FORMAT_BREAKING), w)
               if "role" in part and part["role"].notna().any() else np.nan,
               "adv_decisive": _wmean(dec["adv"], dec["weight"]),
               "adv_free": _wmean(part[~part["decisive"]]["adv"],
                                  part[~part["decisive"]]["weight"]),
               "D_mean": _wmean(part["D"], w)}
        if b is not None and all("norms" in x for x in data["batches"]):
            for k in ("bin", "decisive", "free"):
                row[f"norm_{k}"] = float(np.mean([x["norms"][k][b] for x in data["batches"]]))
        rows.append(row)
    return pd.DataFrame(rows)


def role_summary(data: dict, tau: float) -> pd.DataFrame:
    """Per role (:data:`~tailtheory.engine.tasks.knights_knaves.ROLES`) and bin: tokens (all
    response tokens of the probed prompts), probed tokens, the weighted decisive share and the
    quartiles of ``D``. Empty for a task without roles."""
    df = token_table(data, tau)
    if df.empty or df["role"].isna().all():
        return pd.DataFrame()
    rows = []
    for role in ROLES:
        for b in range(N_BINS):
            part = df[(df["role"] == role) & (df["bin"] == b)]
            n = sum(x["count_role"][role][b] for x in data["batches"])
            if not n and part.empty:
                continue
            q = part["D"].quantile([0.25, 0.5, 0.75]).tolist() if len(part) else [np.nan] * 3
            rows.append({"role": role, "bin": BIN_LABELS[b], "tokens": n, "probed": len(part),
                         "decisive_share": _wmean(part["decisive"], part["weight"]),
                         "D_q25": q[0], "D_median": q[1], "D_q75": q[2]})
    return pd.DataFrame(rows)


def plot_split(summaries: dict, title: str = ""):
    """Figure 1(a) and (d) split in two, one column per policy of ``summaries`` (name ->
    :func:`bin_summary`): top, each bin's share of tokens, decisive part dark; bottom, the
    gradient norm of the bin's decisive and free tokens beside the bin's own (when stored).
    Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    names = list(summaries)
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 6), squeeze=False)
    x = np.arange(N_BINS)
    for j, name in enumerate(names):
        s = summaries[name][summaries[name]["bin"] != "all"]
        frac, share = s["token_frac"].to_numpy(), s["decisive_share"].fillna(0).to_numpy()
        ax = axes[0, j]
        ax.bar(x, frac * share, color="C3", label="decisive")
        ax.bar(x, frac * (1 - share), bottom=frac * share, color="C0", alpha=0.6, label="free")
        ax.set_xticks(x, BIN_LABELS, fontsize=7)
        ax.set_title(f"{name}: tokens per bin", fontsize=9)
        ax.set_ylabel("share of response tokens")
        ax.legend(fontsize=7)
        ax = axes[1, j]
        if "norm_bin" in s:
            for k, (col, c) in enumerate((("norm_bin", "0.5"), ("norm_decisive", "C3"),
                                          ("norm_free", "C0"))):
                ax.bar(x + (k - 1) * 0.27, s[col], 0.27, color=c, label=col[5:])
            ax.legend(fontsize=7)
        ax.set_xticks(x, BIN_LABELS, fontsize=7)
        ax.set_title("(d) ||grad L|| per bin, split", fontsize=9)
        ax.set_xlabel("pi_old bin")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    table = pd.concat([summaries[n].assign(policy=n) for n in names], ignore_index=True)
    return fig, table


def plot_d_vs_p(data: dict, tau: float, title: str = ""):
    """Every probed token's ``D`` against ``p``, coloured by role (or one colour), the
    threshold ``tau`` dashed and the cap ``D <= 1 - p`` dotted. Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = token_table(data, tau)
    fig, ax = plt.subplots(figsize=(6, 4))
    groups = df.groupby("role") if df["role"].notna().any() else [("tokens", df)]
    for k, (role, part) in enumerate(groups):
        ax.scatter(part["p"], part["D"], s=6, alpha=0.5, color=f"C{k}", label=role)
    grid = np.linspace(0, 1, 50)
    ax.plot(grid, 1 - grid, ":", color="0.4", label="D <= 1 - p")
    ax.axhline(tau, ls="--", color="k", lw=1, label=f"tau = {tau:g}")
    ax.set_xlabel("p (sampling policy)")
    ax.set_ylabel("D = |E[R | y_t] - E[R]|")
    ax.set_title(title or "decisiveness of probed tokens", fontsize=9)
    ax.legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    return fig, df[["row", "t", "p", "bin", "role", "D", "D_se", "effect", "weight"]]


def _wmean(x, w) -> float:
    x, w = np.asarray(x, dtype=float), np.asarray(w, dtype=float)
    return float((x * w).sum() / w.sum()) if w.sum() > 0 else float("nan")
