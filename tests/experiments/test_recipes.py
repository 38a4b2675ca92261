"""Named recipes (``tailtheory/experiments/recipes.py``): the ``learn`` testbed's fields, overrides
and bad input."""

from __future__ import annotations

import pytest

from tailtheory.cli import main
from tailtheory.engine import trainer
from tailtheory.experiments import recipes
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
    (["--recipe", "nope"], "valid recipes: decide, learn, matched"),
    (["--recipe", "learn", "--task", "kk"], "recipe 'learn' fixes task = 'kk_trace'"),
    (["--recipe", "learn", "--n-people=3"], "fixes n_people = 2"),
])
def test_bad_recipe_input_is_one_clear_line(argv, message, capsys, monkeypatch):
    def no_model(*args, **kw):
        raise AssertionError("the model was loaded before the recipe was checked")

    monkeypatch.setattr(trainer, "load_start", no_model)
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_recipe_list_prints_every_recipe(capsys):
    assert main(["train", "--recipe", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("decide: ") and "\nlearn: " in out and "\nmatched: " in out
    assert "--n-people 2" in out and "fixed: task" in out


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


def test_matched_recipe_is_learn_in_prose_from_the_pretrained_corpus_lm():
    """``matched`` differs from ``learn`` in its task only, and its warm start starts from the
    corpus LM (its BPE tokenizer) under the same accuracy window."""
    from tailtheory.engine.start.corpus_lm import CorpusLMConfig
    from tailtheory.engine.load import warm_config

    learn, matched = recipes.RECIPES["learn"], recipes.RECIPES["matched"]
    assert {k for k in learn if learn[k] != matched[k]} == {"task"}
    assert matched["task"] == "kk_prose"
    warm = warm_config(recipes.recipe_config("matched"))
    assert warm.pretrained == CorpusLMConfig() and warm.model == CorpusLMConfig().model
    assert warm_config(recipes.recipe_config("learn")).pretrained is None


def test_train_config_rejects_an_unknown_backend():
    with pytest.raises(ValueError, match="unknown rollout_backend 'vllm'"):
        TrainConfig(rollout_backend="vllm")


def test_verdicts_name_the_decoder_the_learn_recipe_rolls_out_with():
    """Every learning-testbed verdict names its decoder (core.registry.LEARN_DECODER): the one the
    recipe sets; V2 and M7 name theirs (hf), so a path name never hides which decoder ran."""
    from tailtheory.core.registry import LEARN_DECODER
    from tailtheory.experiments.recipes import RECIPES
    from tailtheory.tim.claims import DECODER

    assert RECIPES["learn"]["rollout_backend"] == LEARN_DECODER != DECODER == "hf"


def test_decide_recipe_names_the_truth_tellers_from_its_own_warm_start():
    """``decide``: the kk puzzles answered by naming the truth-tellers, its own warm start (no
    corpus LM), a half-way policy at half its steps."""
    from tailtheory.engine.load import warm_config
    from tailtheory.experiments.policies import mid_step

    cfg = recipes.recipe_config("decide")
    assert (cfg.task, cfg.n_people, cfg.temperature) == ("kk_knights", 3, 1.0)
    assert warm_config(cfg).pretrained is None and warm_config(cfg).task == "kk_knights"
    assert mid_step("decide") == cfg.steps // 2 and mid_step("learn") == 60
    with pytest.raises(ValueError, match="fixes task = 'kk_knights'"):
        recipes.recipe_config("decide", task="kk")
