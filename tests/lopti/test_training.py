"""Verdicts of LOPTI's training claims from run numbers (``tailtheory/lopti/training.py``), and the
DVP training verdict (``tailtheory/pruning/training.py``), on hand-made numbers."""

from __future__ import annotations

import math

import pytest

from tailtheory.core.registry import Verdict
from tailtheory.lopti import training as lt
from tailtheory.pruning import training as pt


def rows(*xs, key="final_reward"):
    return [{key: x} for x in xs]


def test_compare_by_hand():
    data = {"A": rows(1.0, 1.2), "B": rows(0.0, 0.2)}
    c = lt.compare(data, "A", "B", "final_reward")
    # delta = 1.1 - 0.1; se = sqrt(0.02 / 2 + 0.02 / 2)
    assert c["delta"] == pytest.approx(1.0) and c["se"] == pytest.approx(math.sqrt(0.02))
    assert c["verdict"] == Verdict.TOY_SCALE
    assert lt.compare(data, "B", "A", "final_reward")["verdict"] == Verdict.REFUTED
    close = {"A": rows(0.3, 0.5), "B": rows(0.2, 0.4)}   # delta 0.1, se 0.141: inside 2 se
    assert lt.compare(close, "A", "B", "final_reward")["verdict"] == Verdict.NOT_REPRODUCED
    with pytest.raises(ValueError, match=">= 2 seeds"):
        lt.compare({"A": rows(1.0), "B": rows(0.0, 0.1)}, "A", "B", "final_reward")


def _data(**means):
    """Three seeds per label at mean +- 0.01 on final reward and held-out accuracy."""
    return {label: [{"final_reward": m + d, "final_eval": m + d} for d in (-0.01, 0.0, 0.01)]
            for label, m in means.items()}


def test_l2_l3_l6_follow_the_orderings():
    good = _data(GRPO=0.2, AR=0.4, Lopti=0.4, **{"Lopti reversed": 0.2, "AR+Lopti": 0.5})
    assert lt.l2_evidence(good).verdict == Verdict.TOY_SCALE
    assert lt.l3_evidence(good).verdict == Verdict.TOY_SCALE
    assert lt.l6_evidence(good).verdict == Verdict.TOY_SCALE
    # Lopti beats GRPO but not its reversed order: both parts are needed
    half = _data(GRPO=0.2, AR=0.2, Lopti=0.4, **{"Lopti reversed": 0.4, "AR+Lopti": 0.1})
    assert lt.l3_evidence(half).verdict == Verdict.NOT_REPRODUCED
    assert lt.l2_evidence(half).verdict == Verdict.NOT_REPRODUCED
    assert lt.l6_evidence(half).verdict == Verdict.REFUTED
    worse = _data(GRPO=0.4, AR=0.2, Lopti=0.1, **{"Lopti reversed": 0.4, "AR+Lopti": 0.2})
    assert lt.l3_evidence(worse).verdict == Verdict.REFUTED
    assert lt.l2_evidence(good).numbers["delta_final_reward"] == pytest.approx(0.2)


def test_lopti_plan_has_every_configuration_and_seed(monkeypatch, tmp_path):
    from tailtheory.engine import presets

    monkeypatch.setattr(presets, "warm_model", lambda preset, progress=True: tmp_path)
    plan = lt.lopti_plan("quick")
    assert set(lt.LOPTI_METHODS) <= set(plan)
    assert {len(v) for v in plan.values()} == {len(presets.SEEDS["quick"])}
    assert {c.alpha for c in plan["AR alpha=0.1"]} == {0.1}
    assert [c.method for c in plan["Lopti reversed"]] == ["lopti_reversed"] * 2
    with pytest.raises(ValueError, match="valid presets"):
        lt.lopti_plan("huge")


def _p5(bound: float, reward_shift: float) -> dict:
    def run(d, b, shift):
        return {"final_reward": 0.3 + shift + d, "bias_bound": [0.0, b],
                "mismatch_abs_mean": [0.002, 0.004]}

    data = {"GRPO": [run(d, 0.0, 0.0) for d in (-0.01, 0.0, 0.01)]}
    for rho in pt.P5_RHOS:
        b = bound if rho <= pt.RHO_CLAIMED else 10.0  # rho = 1e-2 is outside the verdict
        data[f"DVP rho={rho:g}"] = [run(d, b, reward_shift) for d in (-0.01, 0.0, 0.01)]
    return data


def test_p5_verdict_rule():
    assert pt.p5_evidence(_p5(0.01, 0.0)).verdict == Verdict.TOY_SCALE
    assert pt.p5_evidence(_p5(0.2, 0.0)).verdict == Verdict.NOT_REPRODUCED
    assert pt.p5_evidence(_p5(0.01, -0.2)).verdict == Verdict.REFUTED
    nums = pt.p5_evidence(_p5(0.01, 0.0)).numbers
    assert nums["rho=1e-08:max_bias_bound"] == 0.01 and nums["rho=0.01:max_bias_bound"] == 10.0
    assert nums["GRPO:mismatch_abs_mean"] == pytest.approx(0.003)


def test_bias_bound_is_mass_times_length():
    line = {"dvp/pruned_mass": 1e-3, "rollout/len_mean": 50.0}
    assert pt.bias_bound(line) == pytest.approx(0.05)


def _curves():
    """Two labels, three seeds: reward per step, held-out accuracy at steps 0 and 2."""
    return {label: [{"seed": s, "reward": [shift + 0.1 * t + 0.01 * s for t in range(4)],
                     "eval_steps": [0, 2], "eval": [shift + 0.02 * s, shift + 0.2 + 0.02 * s]}
                    for s in range(3)] for label, shift in (("GRPO", 0.0), ("Lopti", 0.3))}


def test_plot_curves_draws_seed_bands_of_the_smoothed_reward_and_of_accuracy():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from plotting import lines_and_bands

    data = _curves()
    fig, df = lt.plot_curves(data, labels=["GRPO", "Lopti"], smooth=2)
    assert set(df.columns) == {"label", "seed", "step", "metric", "value"}   # the stored table
    reward, acc = fig.axes
    (x, y, band), (_, y2, _) = lines_and_bands(reward)
    # seed 0 of GRPO: rewards 0, .1, .2, .3 smoothed over 2 steps; the mean adds .01 (seed 1)
    assert list(x) == [0, 1, 2, 3] and y == pytest.approx([0.01, 0.06, 0.16, 0.26])
    assert band[1.0] == pytest.approx((0.05, 0.07)) and y2[0] == pytest.approx(0.31)
    (x, y, band), _ = lines_and_bands(acc)
    assert list(x) == [0, 2] and y == pytest.approx([0.02, 0.22])
    assert band[2.0] == pytest.approx((0.2, 0.24))
    assert [t.get_text() for t in reward.get_legend().get_texts()] == ["GRPO", "Lopti"]
    assert "3 seeds" in reward.get_legend().get_title().get_text()
    plt.close(fig)
