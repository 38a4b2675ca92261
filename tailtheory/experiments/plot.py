"""``tailtheory plot RUN [RUN ...]``: a training run's curves against step, seeds as a band.

Runs whose configs differ only in ``seed`` form one group, drawn as its mean over seeds with a
band from the lowest to the highest seed (seaborn, :func:`seed_bands`); groups are named by the
config fields that tell them apart (``method=ar``, ``rollout=fp8``). Panels: reward, training
accuracy, held-out accuracy, entropy, mismatch, response length, and every method metric the
runs logged (``ar/...``, ``lopti/...``, ``trm/...``). The figure's data is written beside it as
CSV (one row per group, step and metric: mean, min, max, seeds).
"""

from __future__ import annotations

import json
from pathlib import Path

from tailtheory.core.io import check_out_file, png_software, save_figure
from tailtheory.engine.config import identity_fields
from tailtheory.experiments.comparison import Measurement
from tailtheory.experiments.runs import load_runs

CORE_PANELS = ("reward/mean", "reward/accuracy", "eval/accuracy", "policy/entropy",
               "mismatch/abs_mean", "mismatch/k3", "rollout/len_mean", "grad/norm")
"""Panels every plot has (when the runs logged them)."""

IGNORED = ("step", "time/", "seed", "run", "label", "method")
"""Columns that are not curves."""

NOT_A_DIFFERENCE = identity_fields("replicate", "length", "place", "speed", "output")
"""Config fields that never name a group: seeds are a group's band; the run's length, place,
speed and extra output change none of its curves."""


def _config(run: Path) -> dict:
    f = Path(run) / "config.json"
    if not f.exists():
        raise FileNotFoundError(f"{run} is not a training run (no config.json)")
    return json.loads(f.read_text())


def group_labels(runs) -> list[str]:
    """A label per run: the config fields (other than seed, length, paths) in which its group
    differs from the others, e.g. ``method=ar``; the method spec when all runs share a config."""
    cfgs = [{k: v for k, v in _config(r).items() if k not in NOT_A_DIFFERENCE} for r in runs]
    keys = sorted({k for c in cfgs for k in c if len({json.dumps(d.get(k)) for d in cfgs}) > 1})
    if not keys:
        return [c["method"] for c in cfgs]
    return [" ".join(f"{k}={c.get(k)}" for k in keys) for c in cfgs]


BAND = ("pi", 100)
"""seaborn's ``errorbar`` for a band over seeds: the 100% percentile interval, from the lowest
seed to the highest."""


def seed_bands(data, x: str, y: str, hue: str, ax, order=None, legend: bool = False,
               estimator="mean", alpha: float = 0.2, **kwargs):
    """Per ``hue`` level, ``estimator`` over seeds of ``y`` against ``x`` with the band from the
    lowest to the highest seed: ``seaborn.lineplot`` on the long-form ``data`` (one row per seed
    and ``x``). ``order``: the levels in colour order (default: order of appearance);
    ``legend``: whether this axes gets seaborn's legend entries. Other keywords go to
    ``seaborn.lineplot`` (``lw``, ``marker``). Returns ``ax``."""
    import seaborn as sns

    order = list(dict.fromkeys(data[hue])) if order is None else list(order)
    return sns.lineplot(data, x=x, y=y, hue=hue, hue_order=order, estimator=estimator,
                        errorbar=BAND, err_kws={"alpha": alpha}, legend="auto" if legend else False,
                        ax=ax, **kwargs)


def curve_panels(table, metrics, x: str = "step", smooth: int = 1, order=None, titles=None,
                 legend_panel: int = 0, legend_title: str | None = None, figsize=None, **kwargs):
    """One panel per metric of a long table ``label, seed, <x>, metric, value``: the mean over
    seeds of each label against ``x`` with the band from the lowest to the highest seed
    (:func:`seed_bands`). ``smooth`` > 1 takes a running mean over that many points of each run
    of the ``reward`` metric before the band; ``titles`` maps a metric to its panel title;
    ``legend_panel`` gets the legend. Returns the figure (its axes in ``figure.axes``)."""
    import matplotlib.pyplot as plt

    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth must be an int >= 1, got {smooth!r}")
    order = list(dict.fromkeys(table["label"])) if order is None else list(order)
    titles = dict(titles or {})
    fig, axes = plt.subplots(1, len(metrics), figsize=figsize or (5.5 * len(metrics), 3.8),
                             squeeze=False)
    for i, (ax, metric) in enumerate(zip(axes[0], metrics)):
        d = table[table["metric"] == metric].copy()
        if metric == "reward" and smooth > 1:   # smooth each run before the band over seeds
            d["value"] = d.groupby(["label", "seed"])["value"].transform(
                lambda v: v.rolling(smooth, min_periods=1).mean())
        seed_bands(d, x, "value", "label", ax, order=order, legend=i == legend_panel,
                   alpha=0.15, **kwargs)
        ax.set(xlabel=x, ylabel="")
        ax.set_title(titles.get(metric, metric), fontsize=9)
    seeds = int(table.groupby("label")["seed"].nunique().min()) if len(table) else 0
    axes[0][legend_panel].legend(
        fontsize=7, title=legend_title or f"mean; band: min-max over {seeds} seeds",
        title_fontsize=7)
    fig.tight_layout()
    return fig


def plot_curves(data, labels=None, smooth: int = 5):
    """Reward (running mean over ``smooth`` steps) and held-out accuracy against step for the arms
    ``labels`` (default: all) of a study's measurement (label -> rows with ``reward``,
    ``eval_steps``, ``eval``): mean over seeds, band from the lowest to the highest seed.
    Returns ``(figure, long table)``."""
    df = Measurement(data).curves(labels=labels)
    fig = curve_panels(df, ("reward", "held-out accuracy"), smooth=smooth, lw=1.3,
                       titles={"reward": f"reward (running mean of {smooth})"})
    return fig, df


def long_table(df):
    """Long table ``label, step, seed, metric, value`` (numeric values only) of a
    :func:`~tailtheory.experiments.runs.load_runs` frame: what :func:`plot_runs` draws."""
    import pandas as pd

    metrics = [c for c in df.columns if not c.startswith(IGNORED)]
    long = df.melt(id_vars=["label", "step", "seed"], value_vars=metrics, var_name="metric")
    long = long.dropna(subset=["value"])
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    return long.dropna(subset=["value"])


def _bands(long):
    g = long.groupby(["label", "metric", "step"])["value"]
    out = g.agg(mean="mean", lo="min", hi="max", seeds="count").reset_index()
    return out.sort_values(["metric", "label", "step"], ignore_index=True)


def band_table(df):
    """Long table ``label, metric, step, mean, lo, hi, seeds`` of a :func:`load_runs` frame."""
    return _bands(long_table(df))


def plot_runs(runs, steps: int | None = None):
    """The runs' curves, one panel per metric. Returns ``(figure, band table)``; save both with
    :func:`tailtheory.core.io.save_figure`."""
    import math

    import matplotlib.pyplot as plt


    runs = [Path(r) for r in runs]
    if not runs:
        raise ValueError("no runs given")
    long = long_table(load_runs(runs, labels=group_labels(runs), steps=steps))
    table = _bands(long)
    labels = sorted(table["label"].unique())
    present = set(table["metric"])
    panels = [m for m in CORE_PANELS if m in present]
    panels += sorted(m for m in present if m not in CORE_PANELS and "/" in m
                     and not m.startswith(("loss/", "adv/", "rollout/", "mismatch/", "dvp/",
                                           "trm/accept", "reward/format")))
    cols = 4
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols,
                             figsize=(4 * cols, 3 * math.ceil(len(panels) / cols)),
                             squeeze=False)
    for ax, metric in zip(axes.flat, panels):
        seed_bands(long[long["metric"] == metric], "step", "value", "label", ax, order=labels,
                   legend=ax is axes.flat[0], lw=1.2)
        ax.set_ylabel("")
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    seeds = int(table["seeds"].max())
    axes.flat[0].legend(fontsize=7, title=f"mean; band: min-max over {seeds} seed(s)",
                        title_fontsize=7)
    fig.tight_layout()
    return fig, table


SOFTWARE = "tailtheory plot"
"""The ``Software`` text of the PNGs ``tailtheory plot`` writes: how it knows its own files."""
CSV_HEADER = "label,metric,step,mean,lo,hi,seeds"
"""The first line of the CSVs it writes (:func:`band_table`'s columns)."""


def is_plot_png(path: Path) -> bool:
    """Whether ``path`` is a PNG ``tailtheory plot`` wrote (its ``Software`` text chunk)."""
    return png_software(path) == SOFTWARE


def is_plot_csv(path: Path) -> bool:
    """Whether ``path`` is a CSV ``tailtheory plot`` wrote (its header line)."""
    with open(path, encoding="utf-8") as f:
        return f.readline().rstrip("\r\n") == CSV_HEADER


def add_plot_arguments(p) -> None:
    """Options of ``tailtheory plot``."""
    p.add_argument("runs", nargs="+", help="run directories (tailtheory train --out)")
    p.add_argument("--out", default="runs.png",
                   help="PNG to write, its data beside it as CSV: new files, or files tailtheory "
                        "plot wrote before (replaced); any other file is refused (default: "
                        "runs.png)")
    p.add_argument("--steps", type=int, help="plot the first STEPS steps only")


def plot_main(args) -> int:
    """``tailtheory plot``: write the PNG and CSV and say where. Either file existing and not
    written by ``tailtheory plot`` is refused before anything is read or drawn."""
    if not str(args.out).endswith(".png"):
        raise ValueError(f"--out must name a .png file, got {args.out!r}")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    out = check_out_file(args.out, is_plot_png)
    check_out_file(out.with_suffix(".csv"), is_plot_csv, "--out's CSV")
    fig, table = plot_runs(args.runs, steps=args.steps)
    check_out_file(out, is_plot_png)                       # again: drawing takes a while
    check_out_file(out.with_suffix(".csv"), is_plot_csv, "--out's CSV")
    save_figure(fig, out.stem, table, directory=out.parent, software=SOFTWARE)
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.csv')} "
          f"({table['label'].nunique()} group(s), {len(args.runs)} run(s))")
    return 0
