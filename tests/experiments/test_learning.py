"""The learning curve (``tailtheory/experiments/learning.py``): the criterion of "GRPO learns" on
hand-made stored rows, the study's arms, the runner's CPU record, and the stored measurement."""

from __future__ import annotations

import pytest

from tailtheory.experiments import learning


def _row(rewards, evals: dict, seed=1, **extra) -> dict:
    return {"seed": seed, "reward": list(rewards), "eval_steps": list(evals),
            "eval": list(evals.values()), **extra}


RISING = [0.3 + 0.004 * i for i in range(60)]


def test_summary_and_verdict_on_hand_made_rows():
    s = learning.summarize(_row(RISING, {0: 0.35, 10: 0.4, 40: 0.56, 50: 0.58},
                                cpu_seconds=300.0))
    assert s["warm"] == 0.35 and s["final"] == pytest.approx(0.57)
    assert s["gain"] == pytest.approx(0.22) and s["cpu_minutes"] == 5.0
    assert s["reward_last"] > s["reward_first"]
    assert learning.verdict([s])[0] == "LEARNS"
    small = learning.summarize(_row(RISING, {0: 0.35, 40: 0.5, 50: 0.56}, seed=2))
    assert learning.verdict([s, small]) == ("DOES-NOT-LEARN",
                                            "seeds [2] missed (gains +0.220, +0.180)")
    falling = learning.summarize(_row(RISING[::-1], {0: 0.3, 40: 0.6, 50: 0.6}, seed=3))
    assert learning.verdict([falling])[0] == "DOES-NOT-LEARN"  # held out up, reward down


def test_summary_refuses_rows_without_evaluations():
    with pytest.raises(ValueError, match="evaluations from step 0"):
        learning.summarize(_row([0.5] * 60, {10: 0.5, 20: 0.5, 30: 0.5}))
    with pytest.raises(ValueError, match="no runs"):
        learning.verdict([])


def test_learn_curve_runs_are_the_lopti_studys_grpo_runs():
    """One set of runs: the learning curve trains nothing the LOPTI study does not."""
    from tailtheory.experiments.runs import run_key
    from tailtheory.lopti.training import STUDY as LOPTI

    mine = learning.STUDY.configs("learn")["GRPO"]
    assert [run_key(c) for c in mine] == [run_key(c) for c in LOPTI.configs("learn")["GRPO"]]
    assert [c.seed for c in mine] == list(learning.SEEDS)


def test_the_runner_records_cpu_seconds_over_resumes(tmp_path):
    from tailtheory.experiments import runs

    assert runs.cpu_seconds(tmp_path) is None
    runs._add_cpu_seconds(tmp_path, 2.5)
    runs._add_cpu_seconds(tmp_path, 1.0)                     # a resumed run adds its part
    assert runs.cpu_seconds(tmp_path) == 3.5


def test_stored_learning_curve_learns_in_every_seed():
    """The stored runs (``results/learn_curve.json``) are today's configs and say LEARNS."""
    table = learning.learn_table(learning.STUDY.data("quick"))
    assert list(table["seed"]) == list(learning.SEEDS)
    assert learning.verdict(table.to_dict("records"))[0] == "LEARNS"
    assert (table["cpu_minutes"] > 0).all()
