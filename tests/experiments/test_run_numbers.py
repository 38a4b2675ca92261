"""A run read into numbers (``tailtheory/experiments/run_numbers.py``): windows, curves, token dumps."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tailtheory.experiments import run_numbers as rn


def _run(path, steps=12):
    path.mkdir()
    lines = [{"step": t, "reward/mean": float(t), "rollout/len_mean": 10.0 + t,
              "policy/entropy": 2.0 - 0.1 * t,
              "eval/accuracy": 0.1 * t if t % 5 == 0 else None} for t in range(steps)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    return path


def test_summary_windows_and_curves(tmp_path):
    run = _run(tmp_path / "r")
    s = rn.run_summary(run, 12)
    assert s["final_reward"] == pytest.approx(sum(range(2, 12)) / rn.FINAL_WINDOW)
    assert s["first_reward"] == pytest.approx(sum(range(10)) / 10)
    assert s["final_eval"] == pytest.approx((0.5 + 1.0) / 2) and s["first_eval"] == 0.0
    assert s["len_mean"] == pytest.approx(15.5)
    c = rn.run_curves(run, 6)
    assert c["reward"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and c["eval_steps"] == [0, 5]
    with pytest.raises(ValueError, match="has 12 of 20 steps"):
        rn.run_summary(run, 20)


def test_read_tokens_joins_steps_and_names_a_missing_dump(tmp_path):
    run = _run(tmp_path / "r", steps=2)
    (run / "tokens").mkdir()
    for t in range(2):
        pd.DataFrame({"step": [t, t], "log_rho": [0.0, 0.5]}).to_parquet(
            run / "tokens" / f"step_{t:06d}.parquet")
    df = rn.read_tokens(run, 2)
    assert list(df["step"]) == [0, 0, 1, 1]
    with pytest.raises(FileNotFoundError, match="no token dump for 1 steps"):
        rn.read_tokens(run, 3)


def test_window_means_average_each_runs_window_then_the_runs():
    window_means = rn.window_means
    rows = [{"k3": [1.0, 3.0, 5.0, 7.0]}, {"k3": [2.0, 2.0, 2.0, 10.0]}]
    # first: runs' means 2 and 2; last: 6 and 6
    assert window_means(rows, "k3", 2) == (2.0, 6.0)
    assert window_means(rows, "k3", 1) == (1.5, 8.5)
    with pytest.raises(ValueError, match="no runs"):
        window_means([], "k3")
