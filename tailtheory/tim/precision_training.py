"""FP16 against BF16 in training: the training half of claim V7.

Source: Qi et al., arXiv 2510.26788: "simply reverting to FP16" removes the training-inference
mismatch that BF16 rollouts create, so that FP16 rollouts without any correction train at least
as well as BF16 rollouts with an importance-sampling correction.

The study (``precision_matched``), fixed in the ledger before its runs: the ``matched`` recipe
(its warm start on the base rung of the model-size ladder, where a run costs about 35 CPU
minutes), 120 GRPO steps, seeds :data:`SEEDS`, five arms: ``exact`` (zero mismatch; the very
runs of the recipe's learning curve, same run keys), bf16 rollouts uncorrected (the very runs of
``dvp_matched``'s GRPO arm), bf16 with token TIS, bf16 with MIS (the engine's defaults for both)
and fp16 rollouts uncorrected. A run's final held-out accuracy is the mean of its last 2
evaluations.

Rule (:func:`v7_training`):

- judged only where ``exact`` learns by the recipe's own criterion
  (:func:`tailtheory.experiments.learning.verdict` at ``MATCHED_GAIN``);
- fp16 minus each corrected bf16 arm, with its standard error over seeds: **HOLDS** when both
  differences' lower ends (difference - 2 se) lie above ``-MARGIN``, **REFUTED** when either
  difference's upper end lies below ``-MARGIN``, NOT-REPRODUCED otherwise;
- where uncorrected bf16 is not harmed (``exact`` above it by no more than 2 se, V6's rule) the
  arms cannot be told apart by this comparison, and a HOLDS is reported as **TOY-SCALE**.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.measurements import StaleMeasurement
from tailtheory.experiments.comparison import Z_CRIT, Measurement
from tailtheory.experiments.learning import MATCHED_GAIN, summarize, verdict
from tailtheory.experiments.presets import train_config
from tailtheory.experiments.study import Arm, Study, load_done, register_study

SEEDS = (1, 2, 3)
MARGIN = 0.03
"""Non-inferiority margin on final held-out accuracy (the ledger's)."""

ARMS = {"exact": dict(method="grpo"), "bf16": dict(method="grpo", rollout="bf16"),
        "bf16 + TIS": dict(method="tis", rollout="bf16"),
        "bf16 + MIS": dict(method="mis", rollout="bf16"),
        "fp16": dict(method="grpo", rollout="fp16")}
"""Arm label -> the ``TrainConfig`` fields it sets on the ``matched`` recipe."""


def v7_arms(preset: str) -> list[Arm]:
    """The study's arms (preset ``matched`` only), tagged ``method`` and ``rollout``."""
    if preset != "matched":
        raise ValueError(f"the fp16 / bf16 study runs on the matched preset, not {preset!r}")
    base = train_config("matched")
    return [Arm(label, tuple(replace(base, seed=s, **over) for s in SEEDS),
                {"method": over["method"], "rollout": over.get("rollout", base.rollout)})
            for label, over in ARMS.items()]


STUDY = register_study(Study("precision_matched", v7_arms, measure_preset="matched"))
"""``results/precision_matched.json``: each run's summary and curves (``tailtheory study
precision_matched`` trains what the run cache lacks and stores it run by run)."""


def _diff(m, a: str, b: str) -> tuple[float, float]:
    c = m.compare(a, b, "final_eval")
    return c.delta, c.se


def v7_training(m) -> dict:
    """The rule of the module docstring on a study measurement ``m`` (label -> rows): the
    verdict, whether ``exact`` learns, whether uncorrected bf16 is harmed, and fp16's difference
    from each corrected arm with its standard error."""
    learns, why = verdict([summarize(r) for r in m["exact"]], MATCHED_GAIN)
    harm, harm_se = _diff(m, "exact", "bf16")
    out = {"learns": learns, "learns_reason": why, "bf16_harm": harm, "bf16_harm_se": harm_se,
           "bf16_harmed": harm > Z_CRIT * harm_se}
    lows, highs = [], []
    for arm in ("bf16 + TIS", "bf16 + MIS"):
        d, se = _diff(m, "fp16", arm)
        out[f"fp16 - {arm}"], out[f"fp16 - {arm} se"] = d, se
        lows.append(d - Z_CRIT * se)
        highs.append(d + Z_CRIT * se)
    if learns != "LEARNS":
        out["verdict"] = "NOT-JUDGED (exact does not learn)"
    elif any(h < -MARGIN for h in highs):
        out["verdict"] = "REFUTED"
    elif all(lo > -MARGIN for lo in lows):
        out["verdict"] = "HOLDS" if out["bf16_harmed"] else "TOY-SCALE"
    else:
        out["verdict"] = "NOT-REPRODUCED"
    return out


def stored_v7_training() -> dict:
    """:func:`v7_training` of the stored study, or ``{"verdict": "PENDING (...)"}`` naming the
    runs it lacks and the command that trains them (nothing is trained here)."""
    try:
        m = load_done(STUDY)
    except StaleMeasurement:
        m = Measurement({}, study=STUDY.name)
    if m.missing or set(m) != set(ARMS):
        missing = {label: list(m.missing.get(label, SEEDS)) for label in ARMS
                   if label not in m or label in m.missing}
        runs = sum(len(v) for v in missing.values())
        return {"verdict": f"PENDING ({runs} of {len(ARMS) * len(SEEDS)} runs missing: "
                           f"{STUDY.command})", "missing": missing}
    return v7_training(m)
