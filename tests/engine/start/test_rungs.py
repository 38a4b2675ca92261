"""The rungs of the model-size ladder (``tailtheory/engine/start/rungs.py``): one rule for every
rung, the base rung's configs today's (so no cached model or stored row changes key), the
parameter counts those of the models, and a run taking a rung by name."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tailtheory.core.models import hf_config, num_params, skeleton_lm, tiny_lm
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.start.corpus_lm import CorpusLMConfig
from tailtheory.engine.load import start_key, warm_config
from tailtheory.engine.start.rungs import RUNGS, non_embedding_params, params, rung
from tailtheory.engine.start.sft import SFTConfig, config_hash
from tailtheory.experiments.recipes import recipe_config
from tailtheory.experiments.runs import run_identity, run_key


def test_the_base_rung_is_the_matched_recipes_start():
    base = RUNGS[0]
    assert base.corpus() == CorpusLMConfig()
    assert config_hash(base.warm()) == config_hash(
        SFTConfig.for_task("kk_prose", task_kwargs={"n_people": 2}))


@pytest.mark.parametrize("r", RUNGS, ids=lambda r: r.name)
def test_parameter_counts_are_the_models(r):
    """Counted on the model's skeleton (no weights): all of them, and all but the embedding and
    the head."""
    model = skeleton_lm(hf_config(r.model))
    emb = model.get_input_embeddings().weight.numel() + model.get_output_embeddings().weight.numel()
    assert num_params(model) == params(r.model)
    assert num_params(model) - emb == non_embedding_params(r.model)


def test_the_rule():
    base, w = RUNGS[0], rung("w192")
    assert w.model.heads == 6 and w.model.kv_heads == 3 and w.model.intermediate is None
    c = w.corpus()
    assert c.steps == round(base.corpus().steps * math.sqrt(w.ratio))
    assert c.warmup == c.steps // 20 and c.lr == pytest.approx(base.corpus().lr * 128 / 192)
    assert w.warm().pretrained == c and w.warm().model == w.model
    assert num_params(tiny_lm(base.model)) == params(base.model)        # the smallest, built
    with pytest.raises(ValueError, match="unknown rung 'w9'; the ladder: base, w192"):
        rung("w9")


def test_a_run_takes_a_rung_by_name():
    matched = recipe_config("matched")
    assert matched.rung == "base" and "rung" not in run_identity(matched)   # keys unchanged
    up = dataclasses.replace(matched, rung="w192")
    assert run_identity(up)["rung"] == "w192"
    assert warm_config(up) == rung("w192").warm()
    assert start_key(up) != start_key(matched) and run_key(up) != run_key(matched)
    assert warm_config(matched) == SFTConfig.for_task("kk_prose", task_kwargs={"n_people": 2})
    with pytest.raises(ValueError, match="needs model 'warm' and one of task 'kk_prose' with "
                                         "n_people 2, task 'kk_knights' with n_people 3"):
        TrainConfig(task="kk", rung="w192")
    with pytest.raises(ValueError, match="got 'kk_knights', 2, 'warm'"):
        TrainConfig(task="kk_knights", n_people=2, rung="w192")
    with pytest.raises(ValueError, match="unknown rung 'w9'"):
        TrainConfig(task="kk_prose", n_people=2, rung="w9")


def test_the_decide_recipes_warm_start_at_a_rung():
    """The ``decide`` recipe's warm start (``kk_knights``, three people, from a random init) has a
    size on the ladder: the base rung's is the recipe's own (same hash), a larger rung's the same
    config with that rung's width, depth and heads, its vocabulary and task kept."""
    decide = recipe_config("decide")
    assert warm_config(decide) == SFTConfig.for_task("kk_knights", task_kwargs={})
    assert RUNGS[0].warm("kk_knights") == warm_config(decide)
    up, w = dataclasses.replace(decide, rung="w256"), rung("w256")
    cfg = warm_config(up)
    assert cfg == w.warm("kk_knights") and cfg.pretrained is None and cfg.task == "kk_knights"
    assert (cfg.model.hidden, cfg.model.layers, cfg.model.heads, cfg.model.kv_heads) == (
        w.model.hidden, w.model.layers, w.model.heads, w.model.kv_heads)
    assert cfg.model.vocab_size == warm_config(decide).model.vocab_size != w.model.vocab_size
    assert non_embedding_params(cfg.model) == non_embedding_params(w.model)
    assert cfg.lr == pytest.approx(warm_config(decide).lr * 128 / 256)
    assert config_hash(cfg) != config_hash(warm_config(decide)) and run_key(up) != run_key(decide)
    with pytest.raises(ValueError, match="no warm start of task 'kk' on the ladder"):
        w.warm("kk")
