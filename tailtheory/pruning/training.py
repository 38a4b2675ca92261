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
GRPO's by more than 2 standard errors (the rule of :mod:`tailtheory.experiments.study`);
``REFUTED`` when some such ``rho`` trains significantly worse; ``NOT-REPRODUCED`` when the bound
is not small.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.experiments.plot import curve_panels
from tailtheory.experiments.measures import Measure, register_measure
from tailtheory.experiments.presets import SEEDS, train_config
from tailtheory.experiments.study import Arm, Study, register_study

P5_RHOS = (1e-8, 1e-6, 1e-4, 1e-2)
"""min-p thresholds of the sweep (THEORY: 1e-8 ... 1e-2)."""

RHO_CLAIMED = 1e-4
"""The verdict covers ``rho <= 1e-4``, the range DVP recommends; 1e-2 is reported beside it."""

BIAS_OK = 0.05
"""The P2 bound counts as small below 0.05 (5% of the maximal reward)."""

R_MAX = 1.0
"""The task's largest reward (a correct answer)."""

MATCHED_RHOS = (RHO_CLAIMED,)
"""The sweep on the ``matched`` recipe: the claimed threshold only (a run there costs about 20
CPU-minutes, four times a ``learn`` run)."""


def p5_arms(preset: str) -> list[Arm]:
    """GRPO (bf16 rollouts, no pruning) and DVP at each rho of the sweep (``matched``:
    :data:`MATCHED_RHOS`), over the preset's seeds."""
    base, seeds = train_config(preset, rollout="bf16"), SEEDS[preset]
    rhos = MATCHED_RHOS if preset == "matched" else P5_RHOS
    # learn: GRPO's runs dump their tokens, so they are the dose study's bf16 runs (tim.dose)
    dump = {"dump_tokens": True} if preset == "learn" else {}
    arms = [Arm("GRPO", tuple(replace(base, method="grpo", seed=s, **dump) for s in seeds),
                {"method": "grpo"})]
    arms += [Arm(f"DVP rho={rho:g}", tuple(replace(base, method="dvp", dvp_rho=rho, seed=s)
                                           for s in seeds), {"method": "dvp", "rho": rho})
             for rho in rhos]
    return arms


def bias_bound(line: dict) -> float:
    """P2's bound of one step: ``R_max * mean_seq sum_t m(s_t)`` (0 without pruning)."""
    return R_MAX * line["dvp/pruned_mass"] * line["rollout/len_mean"]


STUDY = register_study(Study(
    "dvp_learn", p5_arms, series={"pruned_mass": "dvp/pruned_mass", "bias_bound": bias_bound,
                                  "mismatch_abs_mean": "mismatch/abs_mean"}))
"""P5 on the learning testbed (preset ``learn``: the recipe on bf16 rollouts, seeds 1-5), stored
run by run in ``results/dvp_learn.json`` (``tailtheory study dvp_learn``): per run its summary,
reward curve, per-step pruned mass, P2 bound and mismatch."""

MATCHED_STUDY = register_study(Study("dvp_matched", p5_arms, series=STUDY.series,
                                     measure_preset="matched"))
"""P5 on the papers' regime (recipe ``matched`` on bf16 rollouts, seeds 1-5: GRPO and DVP at
:data:`MATCHED_RHOS`), stored like :data:`STUDY` in ``results/dvp_matched.json``."""


def p5_evidence(data, study: Study = STUDY) -> Evidence:
    """P5's verdict from the numbers of ``study`` (:data:`STUDY`, or :data:`MATCHED_STUDY` on
    the papers' regime), over the rhos it ran (rule in the module docstring)."""
    m = study.measurement(data)
    mism = lambda label: sum(sum(r["mismatch_abs_mean"]) / len(r["mismatch_abs_mean"])  # noqa
                             for r in m[label]) / len(m[label])
    grpo = m.label(method="grpo")
    nums, small, worse = {f"{grpo}:mismatch_abs_mean": mism(grpo)}, True, False
    for rho in sorted({m.tags[label]["rho"] for label in m.labels(method="dvp")}):
        label = m.label(method="dvp", rho=rho)
        bound = max(max(r["bias_bound"]) for r in m[label])
        c = m.compare(label, grpo, "final_reward")
        nums[f"rho={rho:g}:max_bias_bound"] = bound
        nums[f"rho={rho:g}:delta_final_reward"] = c.delta
        nums[f"rho={rho:g}:se"] = c.se
        nums[f"rho={rho:g}:mismatch_abs_mean"] = mism(label)
        if rho <= RHO_CLAIMED:
            small &= bound < BIAS_OK
            worse |= c.verdict == Verdict.REFUTED
    verdict = (Verdict.REFUTED if worse else Verdict.TOY_SCALE if small
               else Verdict.NOT_REPRODUCED)
    claimed = f"rho={RHO_CLAIMED:g}"
    return Evidence(verdict, nums, f"criterion: for rho <= {RHO_CLAIMED:g}, max P2 bound < "
                    f"{BIAS_OK} and final reward not below GRPO's by > 2 se",
                    key=(f"{claimed}:max_bias_bound", f"{claimed}:delta_final_reward",
                         f"{claimed}:se", f"{grpo}:mismatch_abs_mean"))



def restore_numbers(dose_data) -> dict:
    """Does pruning restore training where mismatch hurts? DVP's arm of V6's dose study
    (:data:`tailtheory.tim.dose.STUDY`, where a controlled mismatch harms GRPO) against GRPO at
    the same dose and against ``exact``, on final held-out accuracy and final reward (delta and
    se of each difference). ``dose_data``: that study's stored runs. Reported beside P5's
    verdict, not in it."""
    from tailtheory.tim.dose import STUDY as DOSE

    m = DOSE.measurement(dose_data)
    dvp = m.label(role="remedy", method="dvp")
    base = m.label(role="dose", kind=m.tags[dvp]["kind"], sigma=m.tags[dvp]["sigma"])
    exact = m.label(role="baseline")
    nums = {"where mismatch hurts: dose": base}
    for key, name in (("final_eval", "held-out"), ("final_reward", "reward")):
        for other, tag in ((base, "minus GRPO there"), (exact, "minus exact")):
            c = m.compare(dvp, other, key)
            nums[f"where mismatch hurts: DVP {tag} ({name})"] = c.delta
            nums[f"where mismatch hurts: DVP {tag} ({name}) se"] = c.se
    return nums


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
    df = p5_table(data)
    keys = ("bias_bound", "mismatch_abs_mean", "reward")
    long = df.melt(id_vars=["label", "seed", "step"], value_vars=list(keys), var_name="metric")
    fig = curve_panels(long, keys, legend_panel=2, figsize=(13, 3.6), lw=1.2, titles={
        "bias_bound": f"P2 bias bound R_max * sum_t m(s_t) (small: < {BIAS_OK})",
        "mismatch_abs_mean": "mean |log rho| of sampled tokens"})
    axes = fig.axes
    axes[0].set_yscale("symlog", linthresh=1e-6)
    axes[0].relim()          # limits with margins in symlog units, as when drawn by hand
    axes[0].autoscale_view()
    return fig, df


SUPERSEDED = register_measure(Measure(
    "dvp_training", "P5 in the no-learning regime (full preset, 40 steps, 3 seeds, bf16 "
    "rollouts)", superseded="study dvp_learn"))
