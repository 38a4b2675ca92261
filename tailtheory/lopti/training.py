"""LOPTI in training (claims L2, L3, L6): GRPO, AR, Lopti, AR+Lopti and Lopti reversed from the
same warm start, several seeds each, and the alpha / eta sweeps (Figure 6 analogues).

Source: LOPTI (Yang et al., arXiv 2505.12929), Section 4 and Figure 6: on Knights and Knaves,
GRPO -> +AR+Lopti raised accuracy 0.39 -> 0.57 (Qwen2.5-3B); Lopti with its order reversed
(high-probability tokens first) is claimed worse. Here the task is ``kk_trace`` (answers after a
worked search of ~100 tokens) on a 0.7M-parameter model: only orderings can carry over.

Every run is cached (:mod:`tailtheory.engine.runs`). A verdict compares two configurations over
seeds with the criterion fixed before measuring (:func:`compare`):

    delta = mean_s(x_A) - mean_s(x_B),   se = sqrt(var_s(x_A)/n_A + var_s(x_B)/n_B)

``TOY-SCALE`` (the claimed ordering reproduced here) when ``delta > Z_CRIT * se``, ``REFUTED``
when ``delta < -Z_CRIT * se``, ``NOT-REPRODUCED`` otherwise. ``x`` is a run's final reward (mean
``reward/mean`` over its last :data:`FINAL_WINDOW` steps) for L2 and L3, and its final held-out
accuracy (mean of its last :data:`FINAL_EVALS` evaluations) for L6.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict

LOPTI_METHODS = {"GRPO": "grpo", "AR": "ar", "Lopti": "lopti", "AR+Lopti": "ar+lopti",
                 "Lopti reversed": "lopti_reversed"}
"""The five training configurations of the comparison (``tailtheory methods`` describes each)."""

ALPHAS = (0.1, 0.3, 0.5, 1.0)
"""AR's alpha sweep (LOPTI Figure 6 uses 0.1-0.5 around its K&K value 0.3; 1.0 weighs by pi)."""

ETAS = (0.25, 0.5, 0.75)
"""Lopti's eta sweep around LOPTI's 0.5."""

KNOBS = {5e-5: ("GRPO", "AR+Lopti"), 1e-3: ("GRPO",)}
"""Learning rates tried beside the main one (full preset only), and the methods run at each: 5e-5
as the gentler step, 1e-3 as the harsher one. Reported beside the verdict, which is fixed on the
main learning rate."""

FINAL_WINDOW = 10
"""Steps averaged into a run's final reward."""

FINAL_EVALS = 2
"""Held-out evaluations averaged into a run's final accuracy."""

Z_CRIT = 2.0
"""An ordering counts when the difference of seed means exceeds 2 standard errors."""


def lopti_plan(preset: str) -> dict[str, list]:
    """Label -> the configs (one per seed) of the comparison and the two sweeps."""
    from tailtheory.engine.presets import SEEDS, train_config

    base, seeds = train_config(preset), SEEDS[preset]
    plan = {label: [replace(base, method=m, seed=s) for s in seeds]
            for label, m in LOPTI_METHODS.items()}
    for a in ALPHAS:
        if a != base.alpha:
            plan[f"AR alpha={a}"] = [replace(base, method="ar", alpha=a, seed=s) for s in seeds]
    for e in ETAS:
        if e != base.eta:
            plan[f"Lopti eta={e}"] = [replace(base, method="lopti", eta=e, seed=s) for s in seeds]
    if preset == "full":
        for lr, labels in KNOBS.items():
            for label in labels:
                plan[f"{label} lr={lr:g}"] = [replace(base, method=LOPTI_METHODS[label], lr=lr,
                                                      seed=s) for s in seeds]
    return plan


def plan_identity(plan: dict[str, list]) -> dict:
    """What a stored measurement of ``plan`` is keyed by: every run's config and the warm start
    (the run directory and thread count aside)."""
    from tailtheory.engine.runs import _identity

    def ident(c):
        d = _identity(c)
        d.pop("device")  # the same runs on another device are the same experiment
        return {**d, "steps": c.steps}

    return {label: [ident(c) for c in cfgs] for label, cfgs in plan.items()}


def run_plan(plan: dict[str, list], workers: int = 1, progress: bool = True) -> dict[str, list]:
    """Train (or find in the cache) every run of ``plan``; label -> run directories."""
    from tailtheory.engine.runs import run_many

    flat = [c for cfgs in plan.values() for c in cfgs]
    paths = iter(run_many(flat, workers=workers, progress=progress))
    return {label: [next(paths) for _ in cfgs] for label, cfgs in plan.items()}


def run_summary(run, steps: int) -> dict:
    """A run's numbers: final reward, final held-out accuracy, first-window reward, length."""
    from tailtheory.engine.trainer import read_metrics

    lines = read_metrics(run)[:steps]
    if len(lines) < steps:
        raise ValueError(f"{run} has {len(lines)} of {steps} steps")
    tail = lines[-FINAL_WINDOW:]
    evals = [m["eval/accuracy"] for m in lines if m.get("eval/accuracy") is not None]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"final_reward": mean([m["reward/mean"] for m in tail]),
            "first_reward": mean([m["reward/mean"] for m in lines[:FINAL_WINDOW]]),
            "final_eval": mean(evals[-FINAL_EVALS:]) if evals else float("nan"),
            "first_eval": evals[0] if evals else float("nan"),
            "len_mean": mean([m["rollout/len_mean"] for m in lines]),
            "entropy_final": mean([m["policy/entropy"] for m in tail])}


def run_curves(run, steps: int) -> dict:
    """A run's per-step ``reward`` and its held-out evaluations ``eval_steps`` / ``eval``."""
    from tailtheory.engine.trainer import read_metrics

    lines = read_metrics(run)[:steps]
    evals = [(m["step"], m["eval/accuracy"]) for m in lines if m.get("eval/accuracy") is not None]
    return {"reward": [m["reward/mean"] for m in lines], "eval_steps": [s for s, _ in evals],
            "eval": [a for _, a in evals]}


def measure_plan(plan: dict[str, list], workers: int = 1, progress: bool = True,
                 numbers=None) -> dict:
    """Label -> list (over seeds) of ``{"seed": ..., **numbers(run, steps)}``; ``numbers``
    defaults to :func:`run_summary` and :func:`run_curves` together."""
    numbers = numbers or (lambda p, steps: {**run_summary(p, steps), **run_curves(p, steps)})
    runs = run_plan(plan, workers, progress)
    return {label: [{"seed": c.seed, **numbers(p, c.steps)} for c, p in zip(plan[label], ps)]
            for label, ps in runs.items()}


def compare(data: dict, a: str, b: str, key: str) -> dict:
    """``a`` against ``b`` on ``key`` over seeds: delta, se and the verdict of the module rule."""
    xa, xb = [r[key] for r in data[a]], [r[key] for r in data[b]]
    if min(len(xa), len(xb)) < 2:
        raise ValueError(f"need >= 2 seeds per configuration to compare, got {len(xa)}, {len(xb)}")
    var = lambda x: sum((v - sum(x) / len(x)) ** 2 for v in x) / (len(x) - 1)  # noqa: E731
    delta = sum(xa) / len(xa) - sum(xb) / len(xb)
    se = math.sqrt(var(xa) / len(xa) + var(xb) / len(xb))
    verdict = (Verdict.TOY_SCALE if delta > Z_CRIT * se else
               Verdict.REFUTED if delta < -Z_CRIT * se else Verdict.NOT_REPRODUCED)
    return {"delta": delta, "se": se, "verdict": verdict}


def _worst(*verdicts: Verdict) -> Verdict:
    """REFUTED beats NOT-REPRODUCED beats TOY-SCALE: a claim with two parts needs both."""
    for v in (Verdict.REFUTED, Verdict.NOT_REPRODUCED):
        if v in verdicts:
            return v
    return Verdict.TOY_SCALE


def _means(data: dict, key: str) -> dict:
    return {f"{label}:{key}": round(sum(r[key] for r in rows) / len(rows), 4)
            for label, rows in data.items()}


def l2_evidence(data: dict) -> Evidence:
    """L2: AR (alpha 0.3) against GRPO on final reward; the alpha sweep's means beside it."""
    c = compare(data, "AR", "GRPO", "final_reward")
    nums = {"delta_final_reward": c["delta"], "se": c["se"], **_means(data, "final_reward")}
    return Evidence(c["verdict"], {k: v for k, v in nums.items() if "Lopti" not in k},
                    "criterion: AR - GRPO final reward (last 10 steps) > 2 se over seeds")


def l3_evidence(data: dict) -> Evidence:
    """L3: Lopti (eta 0.5) against GRPO, and against its reversed order, on final reward."""
    vs_grpo = compare(data, "Lopti", "GRPO", "final_reward")
    vs_rev = compare(data, "Lopti", "Lopti reversed", "final_reward")
    nums = {"delta_vs_grpo": vs_grpo["delta"], "se_vs_grpo": vs_grpo["se"],
            "delta_vs_reversed": vs_rev["delta"], "se_vs_reversed": vs_rev["se"],
            **{k: v for k, v in _means(data, "final_reward").items() if "AR" not in k}}
    return Evidence(_worst(vs_grpo["verdict"], vs_rev["verdict"]), nums,
                    "criterion: Lopti beats GRPO and Lopti reversed, each by > 2 se over seeds "
                    "(final reward, last 10 steps)")


def l6_evidence(data: dict) -> Evidence:
    """L6: AR+Lopti against GRPO on final held-out accuracy (the paper's 0.39 -> 0.57)."""
    c = compare(data, "AR+Lopti", "GRPO", "final_eval")
    nums = {"delta_heldout_acc": c["delta"], "se": c["se"],
            **{k: v for k, v in _means(data, "final_eval").items() if "=" not in k or "lr=" in k}}
    for lr in KNOBS:
        if f"AR+Lopti lr={lr:g}" in data and f"GRPO lr={lr:g}" in data:
            k = compare(data, f"AR+Lopti lr={lr:g}", f"GRPO lr={lr:g}", "final_eval")
            nums[f"lr={lr:g}:delta_heldout_acc"], nums[f"lr={lr:g}:se"] = k["delta"], k["se"]
    return Evidence(c["verdict"], nums, "criterion: AR+Lopti - GRPO final held-out accuracy "
                    "(mean of the last 2 evaluations) > 2 se over seeds")


def measured_plan(name: str, plan: dict[str, list], measure, profile: str, notebook: str) -> dict:
    """``results/<name>.json`` measured under ``plan`` (``quick``), or ``measure(plan,
    workers=2)`` run and stored (``thorough``); ``notebook`` under the full preset regenerates it
    (``tailtheory.core.measurements.measured``)."""
    from tailtheory.core.measurements import measured

    return measured(name, plan_identity(plan), lambda: measure(plan, workers=2), profile,
                    f"TAILTHEORY_PRESET=full python notebooks/{notebook}")


def training_data(profile: str) -> dict:
    """The stored full-preset measurement (``quick``) or a new one (``thorough``)."""
    return measured_plan("lopti_training", lopti_plan("full"), measure_plan, profile,
                         "04_gradient_dominance.py")


def summary_table(data: dict):
    """Table ``label, seed, final_reward, final_eval, ...`` of a measurement (one row per run)."""
    import pandas as pd

    return pd.DataFrame([{"label": label, **{k: v for k, v in row.items() if not
                                             isinstance(v, list)}}
                         for label, rows in data.items() for row in rows])


def curves_table(data: dict, labels=None):
    """Long table ``label, seed, step, metric, value`` of the stored curves (reward per step,
    held-out accuracy per evaluation) of ``labels`` (default: the five methods)."""
    import pandas as pd

    labels = list(LOPTI_METHODS) if labels is None else labels
    rows = []
    for label in labels:
        for r in data[label]:
            rows += [{"label": label, "seed": r["seed"], "step": t, "metric": "reward",
                      "value": v} for t, v in enumerate(r["reward"])]
            rows += [{"label": label, "seed": r["seed"], "step": t, "metric": "held-out accuracy",
                      "value": v} for t, v in zip(r["eval_steps"], r["eval"])]
    return pd.DataFrame(rows)


def plot_curves(data: dict, labels=None, smooth: int = 5):
    """Reward (running mean over ``smooth`` steps) and held-out accuracy against step per method:
    mean over seeds, band from the lowest to the highest seed (seaborn on the long table).
    Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    from tailtheory.engine.plot import seed_bands

    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth must be an int >= 1, got {smooth!r}")
    df = curves_table(data, labels)
    order = list(dict.fromkeys(df["label"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, metric in zip(axes, ("reward", "held-out accuracy")):
        d = df[df["metric"] == metric].copy()
        if metric == "reward":   # smooth each run before taking the band over seeds
            d["value"] = d.groupby(["label", "seed"])["value"].transform(
                lambda v: v.rolling(smooth, min_periods=1).mean())
        seed_bands(d, "step", "value", "label", ax, order=order, legend=metric == "reward",
                   alpha=0.15, lw=1.3)
        ax.set(xlabel="step", ylabel="")
        ax.set_title(metric + (f" (running mean of {smooth})" if metric == "reward" else ""),
                     fontsize=9)
    seeds = df.groupby("label")["seed"].nunique().min()
    axes[0].legend(fontsize=7, title=f"mean; band: min-max over {seeds} seeds", title_fontsize=7)
    fig.tight_layout()
    return fig, df


def plot_sweeps(data: dict):
    """Figure 6 analogue: final reward and held-out accuracy against alpha (AR) and eta (Lopti),
    GRPO as a band; dots are seeds, lines their mean. Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = summary_table(data)
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), squeeze=False)
    sweeps = (("alpha", ALPHAS, "AR", "AR alpha="), ("eta", ETAS, "Lopti", "Lopti eta="))
    for col, (name, values, own, prefix) in enumerate(sweeps):
        labels = {v: own if f"{prefix}{v}" not in data else f"{prefix}{v}" for v in values}
        for row, key in enumerate(("final_reward", "final_eval")):
            ax = axes[row][col]
            g = df[df["label"] == "GRPO"][key]
            ax.axhspan(g.min(), g.max(), color="grey", alpha=0.2, label="GRPO (min-max)")
            xs = [v for v in values if labels[v] in data]
            for v in xs:
                ys = df[df["label"] == labels[v]][key]
                ax.scatter([v] * len(ys), ys, color="C0", s=12)
            ax.plot(xs, [df[df["label"] == labels[v]][key].mean() for v in xs], "o-", color="C0",
                    label=f"{own}: seeds and mean")
            ax.set_xlabel(name)
            ax.set_ylabel(key.replace("_", " "))
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, df
