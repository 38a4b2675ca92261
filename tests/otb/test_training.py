"""OTB in training (``tailtheory/otb/training.py``, claim O6 part b): the verdict rule on
hand-made numbers (both ways), the plan, and the tokens-consumed table; O4's no-EOS lemma."""

from __future__ import annotations

import itertools

import pytest
import torch

from tailtheory.core.registry import Verdict
from tailtheory.otb import figures as otb_figures
from tailtheory.otb import training as ot


def _data(otb: float, small: float, large: float) -> dict:
    """Three seeds per configuration at mean +- 0.01 (final reward and held-out accuracy)."""
    tokens = {ot.OTB_N: 800, ot.LARGE_N: 3200}
    out = {}
    for label, x in zip(ot.O6_CONFIGS, (otb, small, large)):
        n = ot.O6_CONFIGS[label][1]
        out[label] = [{"seed": s, "final_reward": x + d, "final_eval": x + d, "first_reward": 0.2,
                       "reward": [0.2, x + d], "eval_steps": [0], "eval": [0.25],
                       "tokens": [tokens[n]] * 2} for s, d in enumerate((-0.01, 0.0, 0.01))]
    return out


def test_o6_training_rule_both_ways():
    # a large group trains better, OTB at N = 4 matches it and beats GRPO at N = 4
    good = ot.o6_training_evidence(_data(otb=0.4, small=0.2, large=0.4))
    assert good.verdict == Verdict.TOY_SCALE
    assert good.numbers["token_ratio_otb_over_large"] == pytest.approx(0.25)
    # OTB at N = 4 below the large group by > 2 se
    assert ot.o6_training_evidence(_data(0.2, 0.2, 0.4)).verdict == Verdict.REFUTED
    # the group size does not matter here: nothing for OTB to match
    assert ot.o6_training_evidence(_data(0.4, 0.4, 0.4)).verdict == Verdict.NOT_REPRODUCED
    # OTB matches N = 16 only within the noise and does not beat N = 4
    assert ot.o6_training_evidence(_data(0.31, 0.3, 0.32)).verdict == Verdict.NOT_REPRODUCED


def test_o6_arms(monkeypatch, tmp_path):
    from tailtheory.experiments import presets

    monkeypatch.setattr(presets, "warm_model", lambda preset, progress=True: tmp_path)
    plan = ot.STUDY.configs("quick")
    assert {(c.method, c.group_size) for c in plan[f"OTB N={ot.OTB_N}"]} == {("otb", ot.OTB_N)}
    assert {c.group_size for c in plan[f"GRPO N={ot.LARGE_N}"]} == {ot.LARGE_N}
    assert len({c.prompts_per_step for cfgs in plan.values() for c in cfgs}) == 1


def test_o6_table_counts_tokens_before_each_evaluation():
    df = otb_figures.o6_table(_data(0.4, 0.2, 0.4))
    ev = df[(df["metric"] == "held-out accuracy") & (df["label"] == f"OTB N={ot.OTB_N}")]
    assert (ev["tokens"] == 0).all()                 # the step-0 evaluation precedes any rollout
    rw = df[(df["metric"] == "reward") & (df["label"] == f"GRPO N={ot.LARGE_N}")]
    assert sorted(set(rw["tokens"])) == [3200, 6400]


def test_o4_running_mean_lemma_by_hand_and_on_random_inputs():
    """O4 without EOS: the e-weighted running mean beats every constant baseline."""
    from tailtheory.otb.claims import running_mean_gap

    e, b = torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([0.0, 1.0],
                                                                       dtype=torch.float64)
    # B = (0, 0.5): sum e (B - b)^2 = 0.25; constant 0.5: 0.5 -> gap -0.25
    assert running_mean_gap(e, b, 0.5) == pytest.approx(-0.25)
    g = torch.Generator().manual_seed(1)
    for T, _ in itertools.product(range(1, 7), range(50)):
        e = torch.exp(2 * torch.randn(T, generator=g, dtype=torch.float64))
        b = torch.rand(T, generator=g, dtype=torch.float64)
        assert running_mean_gap(e, b, float(torch.rand(1, generator=g))) <= 1e-15


def test_plot_o6_bands_over_seeds_at_the_mean_tokens_of_each_step():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from plotting import lines_and_bands

    data = _data(0.4, 0.2, 0.4)
    fig, df = otb_figures.plot_o6(data, smooth=1)
    assert list(df.columns) == ["label", "seed", "step", "tokens", "metric", "value"]
    reward, acc = fig.axes
    drawn = lines_and_bands(reward)
    assert len(drawn) == len(data)
    x, y, band = drawn[0]                                   # OTB N=4: 800 tokens a step
    assert list(x) == [800, 1600] and y == pytest.approx([0.2, 0.4])
    assert band[1600.0] == pytest.approx((0.39, 0.41))
    x, y, _ = lines_and_bands(acc)[0]
    assert list(x) == [0] and y == pytest.approx([0.25])
    plt.close(fig)
