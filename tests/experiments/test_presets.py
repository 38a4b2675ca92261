"""The notebooks' presets (``tailtheory.experiments.presets``): their configs and their errors."""

import pytest

from tailtheory.experiments import presets


def test_presets_and_their_errors(monkeypatch, tmp_path):
    monkeypatch.setattr(presets, "warm_model", lambda preset, progress=True: tmp_path / preset)

    with pytest.raises(ValueError, match="valid presets: quick, full, learn"):
        presets.check_preset("medium")
    with pytest.raises(ValueError, match="valid presets"):
        presets.train_config("medium")
    quick, full = presets.train_config("quick"), presets.train_config("full")
    assert quick.task == full.task == presets.TRACE_TASK
    assert quick.steps < full.steps and full.model == "warm"
    assert len(presets.SEEDS["full"]) >= 3
    assert presets.train_config("quick", lr=1e-5).lr == 1e-5
    assert quick.model == str(tmp_path / "quick")


def test_warm_start_configs_of_the_presets():
    """``full``: the task's own warm start (stops in its accuracy window); ``quick``: a short
    fixed run, a pipeline check."""
    quick, full = presets.warm_sft_config("quick"), presets.warm_sft_config("full")
    assert quick.task == full.task == presets.TRACE_TASK
    assert full.stop_in_window and not quick.stop_in_window
    assert quick.max_steps == presets.QUICK_SFT_STEPS < full.max_steps
    with pytest.raises(ValueError, match="valid presets"):
        presets.warm_sft_config("medium")


def test_learn_preset_is_the_learning_recipe():
    """``learn``: the recipe's config (five seeds) and the recipe's own warm start."""
    from tailtheory.experiments.recipes import recipe_config
    from tailtheory.engine.start.sft import config_hash
    from tailtheory.engine.load import warm_config

    assert presets.train_config("learn") == recipe_config("learn")
    assert presets.train_config("learn", method="ar", seed=3) == recipe_config(
        "learn", method="ar", seed=3)
    assert presets.SEEDS["learn"] == (1, 2, 3, 4, 5)
    assert config_hash(presets.warm_sft_config("learn")) == config_hash(
        warm_config(recipe_config("learn")))
    with pytest.raises(ValueError, match="fixes n_people"):
        presets.train_config("learn", n_people=3)
