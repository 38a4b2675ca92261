"""Notebook 08's figure: each effect against model size, one panel per claim.

Per panel: every stored seed (small points), each rung's mean with its seed standard deviation,
the fitted trend line over the measured rungs once :func:`tailtheory.ladder.effects.trends` gives a
verdict, its extrapolation to 1B parameters dashed (nothing says the trend stays linear in
``log10`` of the size), and the paper's value or the claim's criterion as a grey line. The x axis
is non-embedding parameters (everything but the input embedding and the output head).
"""

from __future__ import annotations

import math

import numpy as np

from tailtheory.ladder.trend import size_trend
from tailtheory.engine.start.rungs import RUNGS, non_embedding_params, rung
from tailtheory.ladder import decide as size_decide, effects as size, mismatch as size_mismatch

EXTRAPOLATE_TO = 1e9
"""Where the dashed extrapolation ends (parameters)."""

REFERENCE = {"L1 Spearman": (0.5, "criterion 0.5"), "L1 slope": (1.0, "S4: 1"),
             "L4 (d)": (0.87, "paper 0.87"), "L4 (e)": (0.5, "claim < 0.5"),
             "L4 (f)": (0.5, "claim < 0.5"), "L5 AR": (0.0, "GRPO"), "L5 Lopti": (0.0, "GRPO"),
             "M7 slope": (1.0, "M3: 1"), "P4 removed": (0.5, "knee >= 0.5"),
             "V7 ratio": (64.0, "predicted 64")}
"""Effect -> (value, label) of its grey line: LOPTI Fig. 1(d)'s lowest bin over all tokens
(0.71 / 0.82, arXiv 2505.12929), the first-order predictions of S4 and M3, and the claims'
criteria. V2 and V8 have no paper value on this scale."""

BOUNDS = {"L1 Spearman": (-1.0, 1.0), "L4 (d)": (0.0, math.inf), "P4 removed": (-math.inf, 1.0),
          "V8 hf bf16": (0.0, 1.0)}
"""Effect -> the range its values can take: a rank correlation, a norm ratio (one bin's
gradient norm over all tokens': at least 0, and above 1 where the bins cancel), the share of a
KL removed (at most 1; pruning may raise the KL) and a share of tokens. The dashed
extrapolation stops where it would leave it."""

PARAMS = {r.name: non_embedding_params(r.model) for r in RUNGS}


def extrapolation(intercept: float, slope: float, start: float, bounds=None) -> tuple:
    """``(x, y)`` of the dashed line: the trend from ``start`` parameters to
    :data:`EXTRAPOLATE_TO`, cut where it leaves ``bounds`` (``(low, high)`` or None)."""
    xs = np.geomspace(start, EXTRAPOLATE_TO, 50)
    ys = intercept + slope * np.log10(xs)
    if bounds is not None:
        inside = (ys >= bounds[0]) & (ys <= bounds[1])
        xs, ys = xs[inside], ys[inside]
    return xs, ys


def size_frame(data: dict | None = None):
    """One row per (effect, rung, seed): ``effect``, ``rung``, ``params``, ``seed``, ``value``
    (V7's rows also ``low`` and ``high``, its bootstrap interval); the stored effects of
    ``results/ladder_effects.json`` and V7's / V8's per-rung numbers."""
    import pandas as pd

    data = size.read() if data is None else data
    rows = []
    for effect, (part, key, _) in size.EFFECTS.items():
        for r in RUNGS:
            for seed, v in sorted(data.get(r.name, {}).get(part, {}).items()):
                if isinstance(v, dict) and math.isfinite(v.get(key, math.nan)):
                    rows.append({"effect": effect, "rung": r.name, "params": PARAMS[r.name],
                                 "seed": int(seed), "value": float(v[key])})
    for x in size_mismatch.v8_trend()["rungs"]:
        rows.append({"effect": "V8 hf bf16", "rung": x["rung"], "params": PARAMS[x["rung"]],
                     "seed": 0, "value": x["value"]})
    for x in size_mismatch.v7_verdict()["rungs"]:
        for setting, (ratio, low, high) in x["intervals"].items():
            rows.append({"effect": f"V7 ratio ({setting})", "rung": x["rung"],
                         "params": PARAMS[x["rung"]], "seed": 0, "value": ratio, "low": low,
                         "high": high})
    return pd.DataFrame(rows, columns=["effect", "rung", "params", "seed", "value", "low",
                                       "high"])


def _panel(ax, df, effect: str, delta: float | None) -> None:
    sub = df[df.effect == effect]
    title = effect
    ax.scatter(sub.params, sub.value, s=9, color="0.6", zorder=2, label="seed")
    means = sub.groupby("params").value.agg(["mean", "std", "size"]).reset_index()
    ax.errorbar(means.params, means["mean"], yerr=means["std"].fillna(0), fmt="o", ms=5,
                color="C0", capsize=3, zorder=3, label="rung mean (sd)")
    enough = means[means["size"] >= (size.MIN_SEEDS if effect in size.EFFECTS else 1)]
    if len(enough) >= size.MIN_RUNGS and delta is not None:
        t = size_trend(enough.params, enough["mean"], delta)
        xs = np.array([enough.params.min(), enough.params.max()])
        ax.plot(xs, t.intercept + t.slope * np.log10(xs), color="C1",
                label=f"trend: {t.verdict}")
        ax.plot(*extrapolation(t.intercept, t.slope, xs[1], BOUNDS.get(effect)), color="C1",
                ls="--", label="extrapolated")
        title = f"{effect}: {t.verdict} ({len(enough)} rungs)"
    ref = REFERENCE.get(effect.split(" (")[0] if effect.startswith("V7") else effect)
    if ref:
        ax.axhline(ref[0], color="0.5", lw=0.8, ls=":", label=ref[1])
    if effect.startswith("V7"):
        ax.axhspan(*size_mismatch.V7_RANGE, color="0.9", zorder=0, label="holds inside")
        ax.errorbar(sub.params, sub.value, yerr=[sub.value - sub.low, sub.high - sub.value],
                    fmt="none", ecolor="C0", capsize=3, zorder=3)
    ax.set_xscale("log")
    ax.set_xlim(2e5, 2 * EXTRAPOLATE_TO)
    ax.set_title(title, fontsize=9)  # the verdict above the data, never on it
    ax.tick_params(labelsize=7)


def plot_size(data: dict | None = None):
    """The figure and its data (:func:`size_frame`): one panel per effect of
    :data:`tailtheory.ladder.effects.EFFECTS`, then V8 and V7's two settings."""
    import matplotlib.pyplot as plt

    df = size_frame(data)
    panels = [(e, d) for e, (_, _, d) in size.EFFECTS.items()]
    panels += [("V8 hf bf16", size_mismatch.V8_DELTA), ("V7 ratio (vs_float32)", None),
               ("V7 ratio (same_dtype)", None)]
    cols = 4
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols, figsize=(13, 9.5),
                             squeeze=False)
    for ax, (effect, delta) in zip(axes.flat, panels):
        _panel(ax, df, effect, delta)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("non-embedding parameters", fontsize=8)
    handles, labels = {}, {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            key = lab if not lab.startswith("trend") else "trend"
            handles.setdefault(key, h)
            labels.setdefault(key, lab if key != "trend" else "trend over the rungs")
    fig.legend([handles[k] for k in handles if k in ("seed", "rung mean (sd)", "trend",
                                                     "extrapolated")],
               [labels[k] for k in handles if k in ("seed", "rung mean (sd)", "trend",
                                                    "extrapolated")],
               loc="lower right", fontsize=8, frameon=False)
    fig.suptitle("Each effect against model size: the first builds under the first rule "
                 "(superseded records: rows name no model; grey dotted: the paper's value or "
                 "the claim's criterion)", fontsize=10)
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    return fig, df


def plot_decide(data: dict | None = None):
    """The ``decide`` recipe along the ladder (:mod:`tailtheory.ladder.decide`): one panel
    per L1, L4, L5 effect, the seeds (grey), each measured size's mean and sd (blue, joined),
    titled with the two-size verdict and, over 4 rungs, the trend's; the paper's value or the
    criterion dotted. Returns the figure and its rows (``effect``, ``rung``, ``params``, ``seed``,
    ``value``)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    data = size.read() if data is None else data
    params = {n: non_embedding_params(rung(n).warm(size_decide.TASK).model)
              for n in size_decide.DECIDE_RUNGS}
    verdicts = size_decide.decide_sizes(data, size.EFFECTS)
    df = pd.DataFrame([{"effect": e, "rung": n, "params": params[n], "seed": i, "value": v}
                       for e, r in verdicts.items() for n, vals in r["values"].items()
                       for i, v in enumerate(vals, 1)],
                      columns=["effect", "rung", "params", "seed", "value"])
    fig, axes = plt.subplots(2, 4, figsize=(13, 7), squeeze=False)
    for ax, (effect, r) in zip(axes.flat, verdicts.items()):
        sub = df[df.effect == effect]
        ax.scatter(sub.params, sub.value, s=9, color="0.6", zorder=2)
        means = sub.groupby("params").value.agg(["mean", "std"]).reset_index()
        verdict = (" vs ".join(size_decide.TWO_SIZES) + ": " + r["verdict"].split(" (")[0]
                   + (f"\n{len(r['trend']['rungs'])} rungs: {r['trend']['verdict']}"
                      if "trend" in r else ""))
        ax.errorbar(means.params, means["mean"], yerr=means["std"].fillna(0), fmt="o-", ms=5,
                    color="C0", capsize=3, zorder=3, label=verdict)
        if effect in REFERENCE:
            ax.axhline(REFERENCE[effect][0], color="0.5", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlim(3e5, 4e7)
        ax.set_title(f"{effect}\n{verdict}", fontsize=8)  # the verdicts above, never on the data
        ax.tick_params(labelsize=7)
    axes.flat[-1].set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("non-embedding parameters", fontsize=8)
    fig.suptitle("L1, L4, L5 on the decide recipe (lowest-bin tokens decide the answer) against "
                 "size: one build a size, exploratory; grey dotted: the paper's value or the "
                 "criterion", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig, df
