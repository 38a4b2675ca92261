"""DVP in training (claim P5): GRPO with bf16 rollouts, with and without the safe vocabulary.

Source: DVP (Li et al., arXiv 2512.23087): pruning the tail on both sides (the rollout samples
from the min-p safe set ``S(s) = {a : pi(a|s) >= rho max_b pi(b|s)}``, the trainer scores inside
the same set) removes the tail mismatch at a bias bounded by P2:

    |J(pi~) - J(pi)| <= R_max sum_t E[m(s_t)],   m(s) = pi(V \\ S(s) | s)

Per step the engine logs ``dvp/pruned_mass`` (mean of ``m`` over response tokens) and
``rollout/len_mean`` (response tokens per sequence), whose product is the mean over sequences
of ``sum_t m(s_t)``: times ``R_max`` (= 1, the task's reward for a correct answer) it is the P2
bound the step's pruning implies (:func:`bias_bound`).

Verdict (fixed before measuring): for every ``rho <= RHO_CLAIMED``, ``TOY-SCALE`` when the bound
stays below :data:`BIAS_OK` at every step of every seed and the final reward is not below
GRPO's by more than ``Z_CRIT`` standard errors (:func:`tailtheory.lopti.training.compare`);
``REFUTED`` when some such ``rho`` trains significantly worse; ``NOT-REPRODUCED`` when the bound
is not small.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict

P5_RHOS = (1e-8, 1e-6, 1e-4, 1e-2)
"""min-p thresholds of the sweep (THEORY: 1e-8 ... 1e-2)."""

RHO_CLAIMED = 1e-4
"""The verdict covers ``rho <= 1e-4``, the range DVP recommends; 1e-2 is reported beside it."""

BIAS_OK = 0.05
"""The P2 bound counts as small below 0.05 (5% of the maximal reward)."""

R_MAX = 1.0
"""The task's largest reward (a correct answer)."""


def p5_plan(preset: str) -> dict[str, list]:
    """Label -> configs (one per seed): GRPO (bf16, no pruning) and DVP at each rho."""
    from tailtheory.engine.presets import SEEDS, train_config

    base, seeds = train_config(preset, rollout="bf16"), SEEDS[preset]
    plan = {"GRPO": [replace(base, method="grpo", seed=s) for s in seeds]}
    for rho in P5_RHOS:
        plan[f"DVP rho={rho:g}"] = [replace(base, method="dvp", dvp_rho=rho, seed=s)
                                    for s in seeds]
    return plan


def bias_bound(line: dict) -> float:
    """P2's bound of one step: ``R_max * mean_seq sum_t m(s_t)`` (0 without pruning)."""
    return R_MAX * line["dvp/pruned_mass"] * line["rollout/len_mean"]


def p5_run_numbers(run, steps: int) -> dict:
    """A run's final reward plus its per-step pruned mass and bias bound (lists over steps)."""
    from tailtheory.engine.trainer import read_metrics
    from tailtheory.lopti.training import run_summary

    lines = read_metrics(run)[:steps]
    return {**run_summary(run, steps),
            "pruned_mass": [m["dvp/pruned_mass"] for m in lines],
            "bias_bound": [bias_bound(m) for m in lines],
            "mismatch_abs_mean": [m["mismatch/abs_mean"] for m in lines],
            "reward": [m["reward/mean"] for m in lines]}


def measure_p5(plan: dict[str, list], workers: int = 1, progress: bool = True) -> dict:
    """Label -> list over seeds of :func:`p5_run_numbers`."""
    from tailtheory.lopti.training import measure_plan

    return measure_plan(plan, workers, progress, numbers=p5_run_numbers)


def p5_evidence(data: dict) -> Evidence:
    """P5's verdict from :func:`measure_p5`'s numbers (rule in the module docstring)."""
    from tailtheory.lopti.training import compare

    mism = lambda label: sum(sum(r["mismatch_abs_mean"]) / len(r["mismatch_abs_mean"])  # noqa
                             for r in data[label]) / len(data[label])
    nums, small, worse = {"GRPO:mismatch_abs_mean": mism("GRPO")}, True, False
    for rho in P5_RHOS:
        label = f"DVP rho={rho:g}"
        bound = max(max(r["bias_bound"]) for r in data[label])
        c = compare(data, label, "GRPO", "final_reward")
        nums[f"rho={rho:g}:max_bias_bound"] = bound
        nums[f"rho={rho:g}:delta_final_reward"] = c["delta"]
        nums[f"rho={rho:g}:se"] = c["se"]
        nums[f"rho={rho:g}:mismatch_abs_mean"] = mism(label)
        if rho <= RHO_CLAIMED:
            small &= bound < BIAS_OK
            worse |= c["verdict"] == Verdict.REFUTED
    verdict = (Verdict.REFUTED if worse else Verdict.TOY_SCALE if small
               else Verdict.NOT_REPRODUCED)
    return Evidence(verdict, nums, f"criterion: for rho <= {RHO_CLAIMED:g}, max P2 bound < "
                    f"{BIAS_OK} and final reward not below GRPO's by > 2 se")


def training_data(profile: str) -> dict:
    """The stored full-preset measurement (``quick``) or a new one (``thorough``)."""
    from tailtheory.lopti.training import measured_plan

    return measured_plan("dvp_training", p5_plan("full"), measure_p5, profile,
                         "05_pruning_in_training.py")


def p5_table(data: dict):
    """Long table ``label, seed, step, reward, pruned_mass, bias_bound, mismatch_abs_mean``."""
    import pandas as pd

    rows = [{"label": label, "seed": r["seed"], "step": t, **{k: r[k][t] for k in
             ("reward", "pruned_mass", "bias_bound", "mismatch_abs_mean")}}
            for label, runs in data.items() for r in runs for t in range(len(r["reward"]))]
    return pd.DataFrame(rows)


def plot_p5(data: dict):
    """Per step: the P2 bias bound, the sampled-token mismatch and the reward, per rho (mean
    over seeds, band min-max; seaborn on the long table). Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    from tailtheory.engine.plot import seed_bands

    df = p5_table(data)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key in zip(axes, ("bias_bound", "mismatch_abs_mean", "reward")):
        seed_bands(df, "step", key, "label", ax, legend=key == "reward", alpha=0.15, lw=1.2)
    for ax, title in zip(axes, (f"P2 bias bound R_max * sum_t m(s_t) (small: < {BIAS_OK})",
                                "mean |log rho| of sampled tokens", "reward")):
        ax.set_title(title, fontsize=9)
        ax.set(xlabel="step", ylabel="")
    axes[0].set_yscale("symlog", linthresh=1e-6)
    axes[0].relim()          # limits with margins in symlog units, as when drawn by hand
    axes[0].autoscale_view()
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    return fig, df
