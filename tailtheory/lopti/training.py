"""LOPTI in training (claims L2, L3, L6): GRPO, AR, Lopti, AR+Lopti and Lopti reversed from the
same warm start, several seeds each, and the alpha / eta sweeps (Figure 6 analogues).

Source: LOPTI (Yang et al., arXiv 2505.12929), Section 4 and Figure 6: on Knights and Knaves,
GRPO -> +AR+Lopti raised accuracy 0.39 -> 0.57 (Qwen2.5-3B); Lopti with its order reversed
(high-probability tokens first) is claimed worse. Here the task is ``kk_trace`` (answers after a
worked search of ~100 tokens) on a 0.7M-parameter model: only orderings can carry over.

The study (:data:`STUDY`, a :class:`tailtheory.engine.study.Study`) caches every run
(:mod:`tailtheory.engine.runs`). A verdict compares two arms over seeds with the one rule of
:mod:`tailtheory.engine.study`, fixed before measuring: ``TOY-SCALE`` (the claimed ordering
reproduced here) when the difference of seed means exceeds 2 standard errors, ``REFUTED`` when
it is below -2 standard errors, ``NOT-REPRODUCED`` otherwise. The compared number is a run's
final reward (mean ``reward/mean`` over its last 10 steps) for L2 and L3, and its final held-out
accuracy (mean of its last 2 evaluations) for L6.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.registry import Evidence
from tailtheory.engine.comparison import Measurement, worst
from tailtheory.engine.study import Arm, Study, register_study

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

def lopti_arms(preset: str) -> list[Arm]:
    """The comparison's five methods, the alpha and eta sweeps and (full preset) the learning
    rate knobs, each over the preset's seeds."""
    from tailtheory.engine.presets import SEEDS, train_config

    base, seeds = train_config(preset), SEEDS[preset]
    arm = lambda label, tags, **over: Arm(label, tuple(  # noqa: E731
        replace(base, **over, seed=s) for s in seeds), tags)
    arms = [arm(label, {"method": m, "role": "main"}, method=m)
            for label, m in LOPTI_METHODS.items()]
    if preset == "learn":               # the five methods; sweeps and knobs come later
        return arms
    arms += [arm(f"AR alpha={a}", {"method": "ar", "alpha": a, "role": "sweep"}, method="ar",
                 alpha=a) for a in ALPHAS if a != base.alpha]
    arms += [arm(f"Lopti eta={e}", {"method": "lopti", "eta": e, "role": "sweep"},
                 method="lopti", eta=e) for e in ETAS if e != base.eta]
    if preset == "full":
        arms += [arm(f"{label} lr={lr:g}", {"method": LOPTI_METHODS[label], "lr": lr,
                                            "role": "knob"}, method=LOPTI_METHODS[label], lr=lr)
                 for lr, labels in KNOBS.items() for label in labels]
    return arms


STUDY = register_study(Study("lopti_training", lopti_arms, notebook="04_gradient_dominance.py"))
"""L2, L3, L6: the stored measurement ``results/lopti_training.json`` of the full preset."""

LEARN_STUDY = register_study(Study("lopti_learn", lopti_arms, measure_preset="learn",
                                   incremental=True))
"""The five methods on the learning testbed (preset ``learn``, five seeds), stored run by run
in ``results/lopti_learn.json`` as the sweep completes (``tailtheory study lopti_learn``)."""


def learn_data(profile: str) -> Measurement:
    """The learning testbed's runs (:data:`LEARN_STUDY`), every arm at its five seeds; a stored
    measurement that still lacks runs is refused, naming them and the command that trains them."""
    from tailtheory.core.measurements import StaleMeasurement

    m = LEARN_STUDY.data(profile)
    if m.missing:
        raise StaleMeasurement(f"results/lopti_learn.json lacks runs (arm: seeds) {m.missing}; "
                               f"train and store them with: {LEARN_STUDY.command}")
    return m


def _means(data: dict, key: str) -> dict:
    return {f"{label}:{key}": round(sum(r[key] for r in rows) / len(rows), 4)
            for label, rows in data.items()}


def l2_evidence(data) -> Evidence:
    """L2: AR (alpha 0.3) against GRPO on final reward; the alpha sweep's means beside it."""
    c = Measurement(data).compare("AR", "GRPO", "final_reward")
    nums = {"delta_final_reward": c.delta, "se": c.se, **_means(data, "final_reward")}
    return Evidence(c.verdict, {k: v for k, v in nums.items() if "Lopti" not in k},
                    "criterion: AR - GRPO final reward (last 10 steps) > 2 se over seeds")


def l3_evidence(data) -> Evidence:
    """L3: Lopti (eta 0.5) against GRPO, and against its reversed order, on final reward."""
    m = Measurement(data)
    vs_grpo = m.compare("Lopti", "GRPO", "final_reward")
    vs_rev = m.compare("Lopti", "Lopti reversed", "final_reward")
    nums = {"delta_vs_grpo": vs_grpo.delta, "se_vs_grpo": vs_grpo.se,
            "delta_vs_reversed": vs_rev.delta, "se_vs_reversed": vs_rev.se,
            **{k: v for k, v in _means(data, "final_reward").items() if "AR" not in k}}
    return Evidence(worst(vs_grpo.verdict, vs_rev.verdict), nums,
                    "criterion: Lopti beats GRPO and Lopti reversed, each by > 2 se over seeds "
                    "(final reward, last 10 steps)")


def l6_evidence(data) -> Evidence:
    """L6: AR+Lopti against GRPO on final held-out accuracy (the paper's 0.39 -> 0.57)."""
    m = Measurement(data)
    c = m.compare("AR+Lopti", "GRPO", "final_eval")
    nums = {"delta_heldout_acc": c.delta, "se": c.se,
            **{k: v for k, v in _means(data, "final_eval").items() if "=" not in k or "lr=" in k}}
    for lr in KNOBS:
        if f"AR+Lopti lr={lr:g}" in data and f"GRPO lr={lr:g}" in data:
            k = m.compare(f"AR+Lopti lr={lr:g}", f"GRPO lr={lr:g}", "final_eval")
            nums[f"lr={lr:g}:delta_heldout_acc"], nums[f"lr={lr:g}:se"] = k.delta, k.se
    return Evidence(c.verdict, nums, "criterion: AR+Lopti - GRPO final held-out accuracy "
                    "(mean of the last 2 evaluations) > 2 se over seeds")



def plot_curves(data, labels=None, smooth: int = 5):
    """Reward and held-out accuracy against step of the five methods (or ``labels``), seeds as
    a band (:func:`tailtheory.engine.plot.plot_curves`). Returns ``(figure, table)``."""
    from tailtheory.engine.plot import plot_curves as draw

    return draw(data, list(LOPTI_METHODS) if labels is None else labels, smooth)


def plot_sweeps(data: dict):
    """Figure 6 analogue: final reward and held-out accuracy against alpha (AR) and eta (Lopti),
    GRPO as a band; dots are seeds, lines their mean. Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = Measurement(data).table()
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
