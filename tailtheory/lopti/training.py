"""LOPTI in training (claims L2, L3, L6): GRPO, AR, Lopti, AR+Lopti and Lopti reversed from the
same warm start, five seeds each, on the learning testbed; and the field's opposite claims (L7,
L8, L9), each its method against GRPO: on ``matched``, three seeds an arm, judged by Welch's t
(:data:`MATCHED_OPPOSITE_STUDIES`, :func:`opposite_matched_evidence`: the verdicts), and on the
``decide`` recipe, five seeds, by 2 se (:data:`OPPOSITE_STUDIES`: not run, no recipe there learns).

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

The opposite claims (rules fixed in the ledger before any of their runs): L7 (``upweight``,
arXiv 2603.22117) by L2's rule on final reward; L8 (``top_entropy``, arXiv 2506.01939) and L9
(``random_tokens``, arXiv 2605.07660) are non-inferiority claims on final held-out accuracy
against GRPO, margin :data:`NI_MARGIN` (:func:`non_inferiority`: ``HOLDS`` when ``delta - 2 se >
-0.05``, ``REFUTED`` when ``delta + 2 se < -0.05``, ``UNRESOLVED`` otherwise; 2 standard errors,
the ledger's rule for training comparisons, :data:`~tailtheory.experiments.comparison.Z_CRIT`).
Each is judged only where its GRPO arm learns by the recipe's criterion (held-out gain >=
``MATCHED_GAIN`` in every seed, :func:`tailtheory.experiments.learning.verdict`); elsewhere it
stays PENDING, not judged.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.experiments import learning
from tailtheory.experiments.comparison import (Z_CRIT, Comparison, Measurement, welch_values,
                                                worst)
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


# ---- the opposite claims (L7, L8, L9) -------------------------------------------------------

OPPOSITE_RECIPE = "decide"
"""The recipe the opposite claims train on (its five seeds, ``SEEDS["decide"]``)."""

OPPOSITE_METHODS = {"upweight": "Upweight", "top_entropy": "Top-entropy 20%",
                    "random_tokens": "Random 20%"}
"""Each opposite method and its arm's label; each study's other arm is ``GRPO``."""

NI_MARGIN = 0.05
"""L8's and L9's non-inferiority margin on final held-out accuracy, fixed before their runs."""


def opposite_arms(method: str, seeds=None):
    """The arms of ``method``'s study as a function of the preset: ``GRPO`` and ``method`` over
    ``seeds`` (default: the preset's), tagged ``method`` (GRPO's runs are the run cache's, shared
    by the three studies and, for seeds 1-3 on ``decide``, by ``decide_curve``)."""
    if method not in OPPOSITE_METHODS:
        raise ValueError(f"unknown opposite method {method!r}; valid: "
                         f"{', '.join(OPPOSITE_METHODS)}")

    def arms(preset: str) -> list[Arm]:
        base, chosen = train_config(preset), SEEDS[preset] if seeds is None else seeds
        return [Arm(label, tuple(replace(base, method=m, seed=s) for s in chosen), {"method": m})
                for label, m in (("GRPO", "grpo"), (OPPOSITE_METHODS[method], method))]
    arms.__name__ = arms.__qualname__ = f"{method}_arms"
    return arms


OPPOSITE_STUDIES = {m: register_study(Study(f"{m}_{OPPOSITE_RECIPE}", opposite_arms(m),
                                            measure_preset=OPPOSITE_RECIPE))
                    for m in OPPOSITE_METHODS}
"""Method -> its study (``upweight_decide``, ``top_entropy_decide``, ``random_tokens_decide``):
GRPO and the method, five seeds each, stored run by run in ``results/<name>.json``
(``tailtheory study NAME``)."""

MATCHED_SEEDS = (1, 2, 3)
"""The seeds of the opposite claims' studies on ``matched`` (three an arm: Welch's t)."""

MATCHED_OPPOSITE_STUDIES = {
    m: register_study(Study(f"{m}_matched", opposite_arms(m, MATCHED_SEEDS),
                            measure_preset="matched"))
    for m in OPPOSITE_METHODS}
"""Method -> its study on ``matched``, the free end (``upweight_matched``,
``top_entropy_matched``, ``random_tokens_matched``): GRPO and the method from the committed warm
start ``weights/base``, seeds 1-3, stored in ``results/<name>.json``; GRPO's runs shared."""


def non_inferiority(c: Comparison, margin: float = NI_MARGIN) -> Verdict:
    """``HOLDS`` when ``delta - Z_CRIT se > -margin`` (no worse than ``margin``), ``REFUTED``
    when ``delta + Z_CRIT se < -margin`` (worse by more than ``margin``), else ``UNRESOLVED``."""
    if c.delta - Z_CRIT * c.se > -margin:
        return Verdict.HOLDS
    if c.delta + Z_CRIT * c.se < -margin:
        return Verdict.REFUTED
    return Verdict.UNRESOLVED


def opposite_evidence(method: str, data) -> Evidence:
    """L7 (``upweight``: L2's rule on final reward), L8 or L9 (``top_entropy``,
    ``random_tokens``: :func:`non_inferiority` on final held-out accuracy) on ``method``'s study
    data; PENDING (not judged) where its GRPO arm does not learn by the recipe's criterion."""
    m = OPPOSITE_STUDIES[method].measurement(data)
    grpo, arm = m.label(method="grpo"), m.label(method=method)
    if method == "upweight":
        key = "final_reward"
        c = m.compare(arm, grpo, key)
        verdict, rule = c.verdict, ("criterion: Upweight - GRPO final reward (last 10 steps) > 2 "
                                    "se over seeds (L2's)")
    else:
        key = "final_eval"
        c = m.compare(arm, grpo, key)
        verdict = non_inferiority(c)
        rule = (f"criterion: {arm} - GRPO final held-out accuracy (mean of the last 2 "
                f"evaluations) - 2 se > -{NI_MARGIN} (HOLDS), + 2 se < -{NI_MARGIN} (REFUTED)")
    nums = {f"delta_{key}": c.delta, "se": c.se, **_means(m, key, ("grpo", method))}
    return _if_grpo_learns(m, OPPOSITE_RECIPE, Evidence(verdict, nums, rule))


def _if_grpo_learns(m: Measurement, recipe: str, judged: Evidence) -> Evidence:
    """``judged`` with ``GRPO learns`` among its numbers where the measurement's GRPO arm learns by
    the recipe's criterion (:func:`tailtheory.experiments.learning.verdict`); else PENDING (not
    judged), the verdict it would have beside."""
    learns, why = learning.verdict([learning.summarize(r) for r in m[m.label(method="grpo")]],
                                   learning.MATCHED_GAIN)
    nums = {**judged.numbers, "GRPO learns": learns}
    if learns != "LEARNS":
        return Evidence(Verdict.PENDING, {**nums, "verdict if judged": judged.verdict.value},
                        f"not judged: GRPO {learns} on {recipe} ({why}); {judged.note}",
                        ("GRPO learns", "verdict if judged"))
    return Evidence(judged.verdict, nums, judged.note, judged.key)


def opposite_matched_evidence(method: str, data) -> Evidence:
    """L7, L8 or L9 on ``matched`` (:data:`MATCHED_OPPOSITE_STUDIES`, three seeds an arm), the
    rules of the ledger with Welch's t 95% interval of ``d = method - GRPO``
    (:func:`~tailtheory.experiments.comparison.welch_values`) in place of 2 se: L7 on final
    reward, TOY-SCALE above 0, REFUTED below, NOT-REPRODUCED otherwise; L8, L9 on final held-out
    accuracy, HOLDS when the interval's lower end is > -:data:`NI_MARGIN`, REFUTED when its upper
    end is < -:data:`NI_MARGIN`, UNRESOLVED otherwise. PENDING (not judged) where GRPO does not
    learn by ``matched``'s criterion."""
    if method not in OPPOSITE_METHODS:
        raise ValueError(f"unknown opposite method {method!r}; valid: "
                         f"{', '.join(OPPOSITE_METHODS)}")
    m = MATCHED_OPPOSITE_STUDIES[method].measurement(data)
    grpo, arm = m.label(method="grpo"), m.label(method=method)
    key = "final_reward" if method == "upweight" else "final_eval"
    w = welch_values([r[key] for r in m[arm]], [r[key] for r in m[grpo]])
    if method == "upweight":
        verdict = (Verdict.TOY_SCALE if w.low > 0 else Verdict.REFUTED if w.high < 0 else
                   Verdict.NOT_REPRODUCED)
        rule = ("criterion: Upweight - GRPO final reward (last 10 steps), Welch's t 95% "
                "interval above 0 (3 seeds an arm)")
    else:
        verdict = (Verdict.HOLDS if w.low > -NI_MARGIN else Verdict.REFUTED
                   if w.high < -NI_MARGIN else Verdict.UNRESOLVED)
        rule = (f"criterion: {arm} - GRPO final held-out accuracy (mean of the last 2 "
                f"evaluations), Welch's t 95% interval: lower end > -{NI_MARGIN} (HOLDS), upper "
                f"end < -{NI_MARGIN} (REFUTED), 3 seeds an arm")
    nums = {f"delta_{key}": w.delta, "Welch 95%": f"[{w.low:+.3f}, {w.high:+.3f}]",
            "se": w.se, "df": round(w.df, 2), "low": w.low, "high": w.high,
            **_means(m, key, ("grpo", method))}
    return _if_grpo_learns(m, "matched", Evidence(verdict, nums, rule,
                                                   (f"delta_{key}", "Welch 95%")))


def plot_curves(data, labels=None, smooth: int = 5):
    """Reward and held-out accuracy against step of the five methods (or ``labels``), seeds as
    a band (:func:`tailtheory.experiments.plot.plot_curves`). Returns ``(figure, table)``."""
    return draw(data, list(LOPTI_METHODS) if labels is None else labels, smooth)


SUPERSEDED = register_measure(Measure(
    "lopti_training", "L2, L3, L6 in the no-learning regime (full preset, 40 steps, 3 seeds), "
    "with the AR alpha and Lopti eta sweeps", superseded="study lopti_learn"))
