"""The learning-curve summary (``tailtheory/engine/learning.py``): the criterion of "GRPO
learns" on hand-made metric lines, its figure, and the stored measurement."""

from __future__ import annotations

import json

import pytest

from tailtheory.engine import learning


def _lines(rewards, evals) -> list[dict]:
    return [{"step": i, "reward/mean": r, "eval/accuracy": evals.get(i),
             "time/step_s": 2.0, "rollout/len_mean": 45.0} for i, r in enumerate(rewards)]


def _run(tmp_path, name, rewards, evals, seed=1):
    run = tmp_path / name
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"seed": seed, "method": "grpo"}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n"
                                               for m in _lines(rewards, evals)))
    return run


def test_summary_and_verdict_on_hand_made_runs(tmp_path):
    rising = [0.3 + 0.004 * i for i in range(60)]
    good = _run(tmp_path, "good", rising, {0: 0.35, 10: 0.4, 40: 0.56, 50: 0.58})
    s = learning.summarize(good)
    assert s["warm"] == 0.35 and s["final"] == pytest.approx(0.57)
    assert s["gain"] == pytest.approx(0.22) and s["final_steps"] == [40, 50]
    assert s["reward_last"] > s["reward_first"] and s["len_mean"] == 45.0
    assert learning.verdict([s])[0] == "LEARNS"
    small = learning.summarize(_run(tmp_path, "small", rising, {0: 0.35, 40: 0.5, 50: 0.56},
                                    seed=2))
    assert learning.verdict([s, small]) == ("DOES-NOT-LEARN",
                                            "seeds [2] missed (gains +0.220, +0.180)")
    falling = learning.summarize(_run(tmp_path, "falling", rising[::-1],
                                      {0: 0.3, 40: 0.6, 50: 0.6}, seed=3))
    assert learning.verdict([falling])[0] == "DOES-NOT-LEARN"  # held out up, reward down


def test_learning_figure_draws_both_curves_over_seeds(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rising = [0.3 + 0.004 * i for i in range(60)]
    runs = [_run(tmp_path, f"s{s}", rising, {0: 0.3, 50: 0.5 + 0.1 * s}, seed=s) for s in (1, 2)]
    fig, table = learning.plot_learning(runs, smooth=5)
    assert set(table["metric"]) == set(learning.CURVES.values())
    held = table[table["metric"] == "held-out accuracy"]
    assert sorted(held["value"]) == pytest.approx([0.3, 0.3, 0.6, 0.7])
    assert [ax.get_title() for ax in fig.axes] == ["held-out accuracy",
                                                   "train reward (5-step mean)"]
    plt.close(fig)


def test_summary_refuses_runs_without_evaluations(tmp_path):
    with pytest.raises(ValueError, match="evaluations from step 0"):
        learning.summarize(_run(tmp_path, "noeval", [0.5] * 60, {10: 0.5, 20: 0.5, 30: 0.5}))
    with pytest.raises(ValueError, match="no runs"):
        learning.verdict([])


def test_stored_learning_curve_matches_the_recipe():
    """The stored measurement was made under today's recipe and criterion, and says LEARNS."""
    from tailtheory.core.measurements import load_measurement

    data = load_measurement(learning.NAME, learning.config())
    assert [r["seed"] for r in data["rows"]] == list(learning.SEEDS)
    assert learning.verdict(data["rows"]) == (data["verdict"], data["reason"])
