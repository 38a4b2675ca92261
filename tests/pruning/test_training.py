"""DVP in training (tailtheory.pruning.training, claim P5): the verdict rule on hand-made numbers,
the P2 bound per step and the per-step figure (seeds as seaborn bands)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from plotting import lines_and_bands  # noqa: E402
from tailtheory.pruning import training as pt  # noqa: E402

KEYS = ("bias_bound", "mismatch_abs_mean", "reward")


def _data():
    def run(seed, shift):
        return {"seed": seed, **{k: [shift * (i + 1) + seed * 0.01 * t for t in range(4)]
                                 for i, k in enumerate(KEYS)}, "pruned_mass": [0.0] * 4}

    return {"GRPO": [run(s, 0.0) for s in range(3)],
            "DVP rho=1e-08": [run(s, 0.1) for s in range(3)]}


def test_plot_p5_draws_mean_and_min_max_of_each_key_per_label():
    data = _data()
    fig, df = pt.plot_p5(data)
    assert list(df.columns) == ["label", "seed", "step", *("reward", "pruned_mass", "bias_bound",
                                                           "mismatch_abs_mean")]
    assert len(df) == 2 * 3 * 4
    for ax, key in zip(fig.axes, KEYS):
        for (x, y, band), label in zip(lines_and_bands(ax), data):
            g = df[df["label"] == label].groupby("step")[key]
            assert y == pytest.approx(g.mean().to_numpy())
            assert band[3.0] == pytest.approx((g.min()[3], g.max()[3]))
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == list(data)
    assert fig.axes[0].get_legend() is None and fig.axes[0].get_yscale() == "symlog"
    plt.close(fig)


from tailtheory.core.registry import Verdict  # noqa: E402


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


def test_p5_on_the_matched_study_reads_its_one_rho():
    """The matched recipe runs GRPO and DVP at the claimed rho only; the rule reads what ran."""
    arms = pt.MATCHED_STUDY.plan("matched")
    assert [a.label for a in arms] == ["GRPO", f"DVP rho={pt.RHO_CLAIMED:g}"]
    assert {c.rollout for a in arms for c in a.configs} == {"bf16"}
    assert [c.seed for c in arms[1].configs] == [1, 2, 3, 4, 5]
    assert {c.task for a in arms for c in a.configs} == {"kk_prose"}
    data = {k: v for k, v in _p5(0.01, 0.0).items() if k in ("GRPO", "DVP rho=0.0001")}
    ev = pt.p5_evidence(data, pt.MATCHED_STUDY)
    assert ev.verdict == Verdict.TOY_SCALE and "rho=1e-08:max_bias_bound" not in ev.numbers
    bad = {k: v for k, v in _p5(0.2, 0.0).items() if k in data}
    assert pt.p5_evidence(bad, pt.MATCHED_STUDY).verdict == Verdict.NOT_REPRODUCED


def test_bias_bound_is_mass_times_length():
    line = {"dvp/pruned_mass": 1e-3, "rollout/len_mean": 50.0}
    assert pt.bias_bound(line) == pytest.approx(0.05)




def test_learn_study_shares_the_dose_studys_bf16_runs():
    """P5 on the learn preset: its GRPO arm is the dose study's bf16 recompute arm (same run
    keys, seeds 1-5), so the two studies train those runs once."""
    from tailtheory.experiments.runs import run_key
    from tailtheory.experiments.study import get_study
    from tailtheory.pruning.training import STUDY

    grpo = STUDY.configs("learn", ["GRPO"])["GRPO"]
    dose = get_study("mismatch_dose").configs("learn", ["GRPO | bf16 recompute"])
    assert [run_key(c) for c in grpo] == [run_key(c) for c in dose["GRPO | bf16 recompute"]]
    assert {c.rollout for c in grpo} == {"bf16"} and [c.seed for c in grpo] == [1, 2, 3, 4, 5]


def test_restore_numbers_compare_dvp_with_grpo_at_its_dose_and_with_exact():
    """P5's "does pruning restore training where mismatch hurts", on hand-made dose numbers."""
    from tailtheory.tim.dose import REMEDY_SIGMA

    def runs(reward, held):
        return [{"seed": s, "final_reward": reward + d, "final_eval": held + d, "k3": [0.1],
                 "format": [1.0]} for s, d in enumerate((-0.01, 0.0, 0.01))]

    dose = {"GRPO | exact": runs(0.7, 0.6), f"GRPO | logit sigma={REMEDY_SIGMA:g}": runs(0.3, 0.3),
            f"DVP | logit sigma={REMEDY_SIGMA:g}": runs(0.4, 0.5)}
    nums = pt.restore_numbers(dose)
    assert nums["where mismatch hurts: dose"] == f"GRPO | logit sigma={REMEDY_SIGMA:g}"
    assert nums["where mismatch hurts: DVP minus GRPO there (held-out)"] == pytest.approx(0.2)
    assert nums["where mismatch hurts: DVP minus exact (held-out)"] == pytest.approx(-0.1)
    assert nums["where mismatch hurts: DVP minus GRPO there (reward)"] == pytest.approx(0.1)
    # se = sqrt(var_a / 3 + var_b / 3), sample variances 1e-4 each
    assert nums["where mismatch hurts: DVP minus exact (reward) se"] == pytest.approx((2e-4 / 3) ** 0.5)


def test_p5_claim_reads_the_matched_study_with_the_learn_recipes_beside(monkeypatch):
    """P5's verdict is the matched recipe's; the learn recipe's verdict and key numbers are
    printed beside it under their own name."""
    from tailtheory.experiments.study import Study
    from tailtheory.pruning import claims

    matched = {k: v for k, v in _p5(0.01, 0.0).items() if k in ("GRPO", "DVP rho=0.0001")}
    stored = {"dvp_matched": matched, "dvp_learn": _p5(0.2, 0.0), "mismatch_dose": {}}
    monkeypatch.setattr(Study, "data", lambda self, profile, workers=2: stored[self.name])
    monkeypatch.setattr(pt, "restore_numbers", lambda data: {})
    ev = claims._p5("quick")
    assert ev.verdict == Verdict.TOY_SCALE
    assert ev.numbers["measured on"].startswith("matched recipe")
    assert ev.numbers["learn recipe: verdict"] == "NOT-REPRODUCED"
    assert ev.numbers["rho=0.0001:max_bias_bound"] == 0.01
