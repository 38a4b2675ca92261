"""LOPTI in training (claims L2, L3, L6): GRPO, AR, Lopti, AR+Lopti and Lopti reversed from the
same warm start, five seeds each, on the learning testbed.

Source: LOPTI (Yang et al., arXiv 2505.12929), Section 4 and Figure 6: on Knights and Knaves,
GRPO -> +AR+Lopti raised accuracy 0.39 -> 0.57 (Qwen2.5-3B); Lopti with its order reversed
(high-probability tokens first) is claimed worse. Here the task is ``kk_trace`` (answers after a
worked search of ~100 tokens) on a 0.7M-parameter model: only orderings can carry over.

The study (:data:`STUDY`, a :class:`tailtheory.experiments.study.Study`) caches every run
(:mod:`tailtheory.experiments.runs`). A verdict compares two arms over seeds with the one rule of
:mod:`tailtheory.experiments.study`, fixed before measuring: ``TOY-SCALE`` (the claimed ordering
reproduced here) when the difference of seed means exceeds 2 standard errors, ``REFUTED`` when
it is below -2 standard errors, ``NOT-REPRODUCED`` otherwise. The compared number is a run's
final reward (mean ``reward/mean`` over its last 10 steps) for L2 and L3, and its final held-out
accuracy (mean of its last 2 evaluations) for L6.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.registry import Evidence
from tailtheory.experiments.comparison import Measurement, worst
from tailtheory.experiments.measures import Measure, register_measure
from tailtheory.experiments.plot import plot_curves as draw
from tailtheory.experiments.presets import SEEDS, train_config
from tailtheory.experiments.study import Arm, Study, register_study

LOPTI_METHODS = {"GRPO": "grpo", "AR": "ar", "Lopti": "lopti", "AR+Lopti": "ar+lopti",
                 "Lopti reversed": "lopti_reversed"}
"""The five training configurations of the comparison (``tailtheory methods`` describes each)."""

def lopti_arms(preset: str) -> list[Arm]:
    """The comparison's five methods over the preset's seeds, tagged ``method``."""
    base, seeds = train_config(preset), SEEDS[preset]
    return [Arm(label, tuple(replace(base, method=m, seed=s) for s in seeds), {"method": m})
            for label, m in LOPTI_METHODS.items()]


STUDY = register_study(Study("lopti_learn", lopti_arms))
"""L2, L3, L6 on the learning testbed (preset ``learn``, five seeds), stored run by run in
``results/lopti_learn.json`` (``tailtheory study lopti_learn``)."""

MATCHED_STUDY = register_study(Study("lopti_matched", lopti_arms, measure_preset="matched"))
"""L2, L3, L6 on the papers' regime (recipe ``matched``, five seeds), the same five arms, stored
run by run in ``results/lopti_matched.json``; its GRPO runs are ``matched_curve``'s."""


def _means(m: Measurement, key: str, methods=tuple(LOPTI_METHODS.values())) -> dict:
    """Seed mean of ``key`` of each arm whose method is in ``methods``, rounded to 4 digits."""
    return {f"{label}:{key}": round(sum(r[key] for r in m[label]) / len(m[label]), 4)
            for label in m if m.tags[label]["method"] in methods}


def l2_evidence(data, study: Study = STUDY) -> Evidence:
    """L2: AR (alpha 0.3) against GRPO on final reward (``study``: :data:`STUDY`, or
    :data:`MATCHED_STUDY` on the papers' regime)."""
    m = study.measurement(data)
    c = m.compare(m.label(method="ar"), m.label(method="grpo"), "final_reward")
    nums = {"delta_final_reward": c.delta, "se": c.se,
            **_means(m, "final_reward", ("grpo", "ar"))}
    return Evidence(c.verdict, nums,
                    "criterion: AR - GRPO final reward (last 10 steps) > 2 se over seeds")


def l3_evidence(data, study: Study = STUDY) -> Evidence:
    """L3: Lopti (eta 0.5) against GRPO, and against its reversed order, on final reward
    (``study`` as in :func:`l2_evidence`)."""
    m = study.measurement(data)
    lopti = m.label(method="lopti")
    vs_grpo = m.compare(lopti, m.label(method="grpo"), "final_reward")
    vs_rev = m.compare(lopti, m.label(method="lopti_reversed"), "final_reward")
    nums = {"delta_vs_grpo": vs_grpo.delta, "se_vs_grpo": vs_grpo.se,
            "delta_vs_reversed": vs_rev.delta, "se_vs_reversed": vs_rev.se,
            **_means(m, "final_reward", ("grpo", "lopti", "lopti_reversed"))}
    return Evidence(worst(vs_grpo.verdict, vs_rev.verdict), nums,
                    "criterion: Lopti beats GRPO and Lopti reversed, each by > 2 se over seeds "
                    "(final reward, last 10 steps)")


def l6_evidence(data, study: Study = STUDY) -> Evidence:
    """L6: AR+Lopti against GRPO on final held-out accuracy (the paper's 0.39 -> 0.57;
    ``study`` as in :func:`l2_evidence`)."""
    m = study.measurement(data)
    c = m.compare(m.label(method="ar+lopti"), m.label(method="grpo"), "final_eval")
    nums = {"delta_heldout_acc": c.delta, "se": c.se, **_means(m, "final_eval")}
    return Evidence(c.verdict, nums, "criterion: AR+Lopti - GRPO final held-out accuracy "
                    "(mean of the last 2 evaluations) > 2 se over seeds")


def plot_curves(data, labels=None, smooth: int = 5):
    """Reward and held-out accuracy against step of the five methods (or ``labels``), seeds as
    a band (:func:`tailtheory.experiments.plot.plot_curves`). Returns ``(figure, table)``."""
    return draw(data, list(LOPTI_METHODS) if labels is None else labels, smooth)


SUPERSEDED = register_measure(Measure(
    "lopti_training", "L2, L3, L6 in the no-learning regime (full preset, 40 steps, 3 seeds), "
    "with the AR alpha and Lopti eta sweeps", superseded="study lopti_learn"))
