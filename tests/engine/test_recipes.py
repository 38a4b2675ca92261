"""Named recipes (``tailtheory/engine/recipes.py``) and the learning-curve summary
(``tailtheory/engine/learning.py``): the ``learn`` testbed's fields, overrides, bad input, and
the criterion of "GRPO learns" on hand-made metric lines."""

from __future__ import annotations

import json

import pytest

from tailtheory.cli import main
from tailtheory.engine import learning, recipes, trainer
from tailtheory.engine.config import TrainConfig


def test_learn_recipe_fills_the_testbed_and_flags_override_one_field():
    cfg = recipes.recipe_config("learn", seed=11, out="x")
    assert (cfg.task, cfg.n_people, cfg.rollout, cfg.rollout_backend) == \
        ("kk_trace", 2, "exact", "fast")
    assert cfg.prompts_per_step * cfg.group_size >= 256 and cfg.eval_n >= 256
    assert cfg.seed == 11 and cfg.out == "x"
    assert recipes.recipe_config("learn", lr=3e-4).lr == 3e-4
    assert recipes.recipe_config("learn", task="kk_trace").task == "kk_trace"  # same value: fine


@pytest.mark.parametrize("argv, message", [
    (["--recipe", "nope"], "valid recipes: learn"),
    (["--recipe", "learn", "--task", "kk"], "recipe 'learn' fixes task = 'kk_trace'"),
    (["--recipe", "learn", "--n-people=3"], "fixes n_people = 2"),
])
def test_bad_recipe_input_is_one_clear_line(argv, message, capsys, monkeypatch):
    def no_model(*args, **kw):
        raise AssertionError("the model was loaded before the recipe was checked")

    monkeypatch.setattr(trainer, "load_model", no_model)
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_recipe_list_prints_every_recipe(capsys):
    assert main(["train", "--recipe", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("learn: ") and "--n-people 2" in out and "fixed: task" in out


def test_cli_passes_explicit_flags_only(monkeypatch, tmp_path):
    """Flags written out override the recipe (also at the engine's default value); the others
    keep the recipe's."""
    seen = {}
    monkeypatch.setattr("tailtheory.engine.trainer.train",
                        lambda cfg, **kw: seen.setdefault("cfg", cfg) and tmp_path)
    assert main(["train", "--recipe", "learn", "--seed", "3", "--lr", "1e-4",
                 "--eval-n=300", "--out", str(tmp_path / "r")]) == 0
    cfg = seen["cfg"]
    assert (cfg.seed, cfg.eval_n, cfg.steps) == (3, 300, recipes.RECIPES["learn"]["steps"])
    assert cfg.lr == 1e-4 and cfg.task == "kk_trace"


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


def test_train_config_rejects_an_unknown_backend():
    with pytest.raises(ValueError, match="unknown rollout_backend 'vllm'"):
        TrainConfig(rollout_backend="vllm")
