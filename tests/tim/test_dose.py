"""Mismatch dose-response (``tailtheory/tim/dose.py``, claim V6): the plan on the learn preset,
the harm / threshold / register rules on hand-made numbers (each outcome), and V6's verdict both
ways."""

from __future__ import annotations

import math

import pytest

from tailtheory.core.registry import Verdict
from tailtheory.experiments.runs import run_key
from tailtheory.tim import dose


def _row(seed, acc, k3=1e-3, fmt=0.9):
    return {"seed": seed, "final_eval": acc, "final_reward": acc, "k3": [k3, k3 * 1.5],
            "format": [fmt, fmt]}


def _data(points, exact=(0.62, 0.63, 0.64, 0.63, 0.62)):
    """``points``: label -> (accuracies over seeds, k3, format)."""
    data = {"GRPO | exact": [_row(s + 1, a, k3=0.0) for s, a in enumerate(exact)]}
    for label, (accs, k3, fmt) in points.items():
        data[label] = [_row(s + 1, a, k3, fmt) for s, a in enumerate(accs)]
    return data


SAFE, HURT = (0.63, 0.62, 0.64), (0.40, 0.42, 0.41)


def test_plan_is_the_learn_preset_and_shares_lopti_grpo_runs():
    from tailtheory.lopti.training import STUDY as LOPTI

    arms = {a.label: a for a in dose.STUDY.plan("learn")}
    grpo = LOPTI.configs("learn", ["GRPO"])["GRPO"]
    assert [run_key(c) for c in arms["GRPO | exact"].configs] == [run_key(c) for c in grpo]
    for s in dose.LOGIT_SIGMAS:
        a = arms[f"GRPO | logit sigma={s:g}"]
        assert {c.rollout_noise for c in a.configs} == {s}
        assert [c.seed for c in a.configs] == list(
            dose.SCREEN_SEEDS if ("logit", s) in dose.SCREENED else dose.DOSE_SEEDS)
        assert a.tags["kind"] == "logit" and a.tags["sigma"] == s
    assert dose.REMEDY_SIGMA in dose.LOGIT_SIGMAS
    remedies = [a for a in arms.values() if a.tags["role"] == "remedy"]
    assert sorted(a.tags["method"] for a in remedies) == sorted(dose.REMEDIES.values())
    assert all(c.rollout_noise == dose.REMEDY_SIGMA for a in remedies for c in a.configs)
    with pytest.raises(ValueError, match="learn preset"):
        dose.dose_arms("quick")


def test_dose_table_harm_and_pending():
    data = _data({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9), "GRPO | logit sigma=2": (HURT, 1e-2, 0.9),
                  "GRPO | logit sigma=4": ((0.3, 0.31), 0.1, 0.9)})
    rows = {r["label"]: r for r in dose.dose_table(data)}
    assert rows["GRPO | logit sigma=1"]["harmed"] is False
    assert rows["GRPO | logit sigma=2"]["harmed"] is True
    assert rows["GRPO | logit sigma=2"]["gap"] == pytest.approx(0.628 - 0.41, abs=1e-9)
    assert rows["GRPO | logit sigma=4"]["harmed"] is None           # 2 seeds: pending
    assert rows["GRPO | logit sigma=2"]["k3"] == pytest.approx(1.25e-2)   # run mean, then seeds
    assert rows["GRPO | exact"]["harmed"] is None


def test_threshold_cases():
    row = lambda s, k3, harmed, wf=True: {"sigma": s, "k3": k3, "harmed": harmed,  # noqa: E731
                                          "well_formed": wf}
    t = dose.threshold([row(1, 1e-3, False), row(2, 1e-2, True), row(4, 1e-1, True)])
    assert (t["k3_safe"], t["k3_harm"], t["sigma_harm"], t["monotone"]) == (1e-3, 1e-2, 2, True)
    t = dose.threshold([row(1, 1e-3, False), row(2, 1e-2, True), row(4, 1e-1, False)])
    assert t["monotone"] is False
    t = dose.threshold([row(1, 1e-3, False), row(2, 1e-2, False), row(4, 0.1, None)])
    assert math.isnan(t["k3_harm"]) and t["k3_safe"] == 1e-2 and t["pending"] == [4]
    t = dose.threshold([row(1, 1e-3, True)])
    assert math.isnan(t["k3_safe"]) and t["k3_harm"] == 1e-3


def test_v6_toy_scale_on_a_monotone_well_formed_threshold():
    data = _data({"GRPO | logit sigma=0.3": (SAFE, 1e-4, 0.9),
                  "GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),
                  "GRPO | logit sigma=2": (HURT, 1e-2, 0.8)})
    ev = dose.v6_evidence(data)
    assert ev.verdict == Verdict.TOY_SCALE
    assert ev.numbers["logit:k3_safe"] == pytest.approx(1.25e-3)
    assert ev.numbers["logit:k3_harm"] == pytest.approx(1.25e-2)


@pytest.mark.parametrize("points", [
    {"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9), "GRPO | logit sigma=2": (SAFE, 1e-2, 0.9)},
    {"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9), "GRPO | logit sigma=2": (HURT, 1e-2, 0.2)},
    {"GRPO | logit sigma=1": (HURT, 1e-3, 0.9), "GRPO | logit sigma=2": (SAFE, 1e-2, 0.9)},
], ids=["no harm", "harm only where ill-formed", "harm not monotone"])
def test_v6_not_reproduced(points):
    assert dose.v6_evidence(_data(points)).verdict == Verdict.NOT_REPRODUCED


def test_register_names_remedies_and_real_paths():
    label = f"TIS | logit sigma={dose.REMEDY_SIGMA:g}"
    data = _data({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),
                  f"GRPO | logit sigma={dose.REMEDY_SIGMA:g}": (HURT, 1e-2, 0.9),
                  label: (SAFE, 1.1e-2, 0.9), "GRPO | fp8 bypass": (SAFE, 2e-4, 0.9)})
    reg = dose.register_table(data)
    tis = next(r for r in reg if r["method"] == "tis")
    assert tis["moves_threshold"] is True and tis["harmed"] is False
    fp8 = next(r for r in reg if r["kind"] == "fp8 bypass")
    assert fp8["k3"] == pytest.approx(2.5e-4) and fp8["harmed"] is False


def test_register_text_names_only_measured_numbers():
    data = _data({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),
                  "GRPO | logit sigma=2": (HURT, 1e-2, 0.9),
                  "GRPO | logit sigma=4": ((0.3,), 0.1, 0.9),
                  f"MIS | logit sigma={dose.REMEDY_SIGMA:g}": ((0.4, 0.41), 1e-2, 0.9)})
    text = "\n".join(dose.register_text(data))
    assert "no harm measurable below k3 = 0.0013; harmed from k3 = 0.013 (sigma = 2)" in text
    assert "sigmas still pending: 4" in text
    assert "mis at logit sigma" in text and "pending (fewer than 3 seeds)" in text


def test_real_path_evidence_both_ways():
    none = dose.real_path_evidence(_data({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9)}))
    assert none[0].verdict == Verdict.NOT_REPRODUCED and none[0].numbers["harmed"] == "none"
    ok = dose.real_path_evidence(_data({"GRPO | fp8 bypass": (SAFE, 2e-4, 0.9),
                                        "GRPO | bf16 recompute": ((0.6,), 1e-4, 0.9)}))
    assert ok[0].verdict == Verdict.NOT_REPRODUCED == ok[1].verdict
    assert "bf16 recompute" in ok[0].numbers["pending"]
    hurt = dose.real_path_evidence(_data({"GRPO | fp8 bypass": (HURT, 2e-4, 0.9)}))
    assert hurt[0].verdict == Verdict.TOY_SCALE
    # _row's k3 series is [k3, 1.5 k3], shorter than the window: flat -> V5 TOY-SCALE
    assert hurt[1].verdict == Verdict.TOY_SCALE
    assert hurt[1].numbers["fp8 bypass:k3_final"] == pytest.approx(2.5e-4)
    rising = _data({"GRPO | fp8 bypass": (HURT, 2e-4, 0.9)})
    for r in rising["GRPO | fp8 bypass"]:
        r["k3"] = [1e-4] * 10 + [1e-3] * 10              # x10 from the first to the last window
    assert dose.real_path_evidence(rising)[1].verdict == Verdict.REFUTED
