"""Figures and tables of the mismatch dose-response (claim V6, :mod:`tailtheory.tim.dose`): each
``plot_*`` returns ``(figure, table)`` with the table the figure is drawn from.
"""

from __future__ import annotations

import math

from tailtheory.tim.dose import (MIN_SEEDS, REMEDIES, STUDY, WELL_FORMED, dose_table,
                                 threshold)

REMEDY_NAMES = {method: name for name, method in REMEDIES.items()}
"""A remedy's method -> the name its arm is drawn under."""

_STYLE = {"logit": ("o", "C0", "GRPO, logit noise"), "weight": ("s", "C1", "GRPO, weight noise"),
          "real": ("D", "C3", "GRPO, real paths"), "remedy": ("^", "C2", "remedies, logit noise")}


def dose_frame(data):
    """:func:`tailtheory.tim.dose.dose_table` as a pandas frame (one row per arm)."""
    import pandas as pd

    return pd.DataFrame(dose_table(data))


def run_points(data):
    """Long table ``label, seed, kind, method, sigma, k3, final_eval, final_reward, format``: one
    row per run (its mean k3 over its steps; its final held-out accuracy)."""
    import pandas as pd

    m = STUDY.measurement(data)
    rows = []
    for label in m:
        t = m.tags.get(label, {})
        for r in m[label]:
            rows.append({"label": label, "seed": r["seed"], "kind": t.get("kind"),
                         "role": t.get("role"), "method": t.get("method"),
                         "sigma": t.get("sigma"), "k3": sum(r["k3"]) / len(r["k3"]),
                         "final_eval": r["final_eval"], "final_reward": r["final_reward"],
                         "format": sum(r["format"]) / len(r["format"])})
    return pd.DataFrame(rows)


K3_FLOOR = 1e-7
"""Left edge of the dose plot's k3 axis: a path measured below it (``kv``: ~1e-15, float32
round-off) is drawn at the edge and its tag gives its measured k3, so one point does not
stretch the axis over eight empty decades."""


def plot_dose(data):
    """V6: final held-out accuracy (left) and the rollouts' well-formed share (right) against
    each run's **measured** mean k3 (log axis). Small markers are runs, large ones the mean of
    an arm's seeds with its standard error; a point with fewer than ``MIN_SEEDS`` seeds (a
    screen, never compared) is a hollow marker without an error bar; the grey band is the zero-mismatch ``exact`` runs
    (mean +- 2 se, their k3 is 0 so they have no place on the axis); the shaded span is GRPO's
    logit-noise threshold (``k3_safe`` to ``k3_harm``). Returns ``(figure, arm table)``."""
    import matplotlib.pyplot as plt

    df = dose_frame(data)
    runs = run_points(data)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    base = df[df["role"] == "baseline"].iloc[0]
    for ax, key in zip(axes, ("final_eval", "format")):
        if key == "final_eval":
            ax.axhspan(base["final_eval"] - 2 * base["final_eval_se"],
                       base["final_eval"] + 2 * base["final_eval_se"], color="grey", alpha=0.25,
                       label=f"exact (k3 = 0), mean +- 2 se, {base['seeds']} seeds")
        else:
            ax.axhline(WELL_FORMED, color="grey", ls=":", lw=1, label="well-formed bar")
        for style, sel in (("logit", (df["kind"] == "logit") & (df["role"] == "dose")),
                           ("weight", df["kind"] == "weight"), ("real", df["role"] == "real"),
                           ("remedy", df["role"] == "remedy")):
            marker, color, name = _STYLE[style]
            arms = df[sel]
            if arms.empty:
                continue
            pts = runs[runs["label"].isin(arms["label"])]
            ax.scatter(pts["k3"].clip(lower=K3_FLOOR), pts[key], marker=marker, color=color,
                       s=10, alpha=0.4)
            full, screen = arms[arms["seeds"] >= MIN_SEEDS], arms[arms["seeds"] < MIN_SEEDS]
            yerr = full["final_eval_se"].fillna(0) if key == "final_eval" else None
            ax.errorbar(full["k3"].clip(lower=K3_FLOOR), full[key], yerr=yerr, fmt=marker,
                        color=color, ms=7, capsize=2, label=name, lw=1)
            ax.scatter(screen["k3"].clip(lower=K3_FLOOR), screen[key], marker=marker, s=49,
                       facecolors="none", edgecolors=color, linewidths=1.2)
            if style in ("logit", "weight"):
                order = arms.sort_values("sigma")
                ax.plot(order["k3"], order[key], color=color, lw=0.8, alpha=0.6)
            for i, (_, a) in enumerate(arms.sort_values("k3").iterrows()):
                tag = (f"σ={a['sigma']:g}" if style in ("logit", "weight") else
                       REMEDY_NAMES[a["method"]] if style == "remedy" else
                       f"{a['path']} {a['pi_old']}")
                if a["seeds"] < MIN_SEEDS:
                    tag += f" ({a['seeds']} seed, screen)"
                if a["k3"] < K3_FLOOR:
                    tag += f" (k3 = {a['k3']:.1g}, drawn at the edge)"
                # neighbours in k3 alternate above and below, so tags of close points separate
                ax.annotate(tag, (max(a["k3"], K3_FLOOR), a[key]), fontsize=6,
                            xytext=(4, 5 if i % 2 == 0 else -9), textcoords="offset points")
        t = threshold([r for r in df.to_dict("records")
                       if r["method"] == "grpo" and r["kind"] == "logit"])
        if not math.isnan(t["k3_harm"]):
            lo = t["k3_safe"] if not math.isnan(t["k3_safe"]) else t["k3_harm"] / 3
            ax.axvspan(lo, t["k3_harm"], color="C0", alpha=0.08, label="GRPO threshold (logit)")
        ax.set_xscale("log")
        ax.set_xlabel("measured mismatch: mean per-token k3 of the run")
    axes[0].set_ylabel("final held-out accuracy")
    axes[1].set_ylabel("rollouts with a well-formed answer (mean reward/format)")
    axes[0].legend(fontsize=7, loc="lower left")
    axes[0].set_title("held-out accuracy (noise-free evaluation) against mismatch", fontsize=9)
    axes[1].set_title("are the mismatched rollouts still well-formed?", fontsize=9)
    fig.tight_layout()
    return fig, df
