"""The model-size ladder (``tailtheory/experiments/ladder.py``): one rule for every rung, the base
rung's configs today's (so no stored row is orphaned), the table's parameter counts those of the
built models, and ``ladder build`` recording each rung as it finishes. Builds here use the
smallest rung only, with the corpus LM and the warm start replaced by recorded folders."""

from __future__ import annotations

import json
import math

import pytest

from tailtheory.cli import main
from tailtheory.core.models import hf_config, num_params, skeleton_lm, tiny_lm
from tailtheory.engine.start.corpus_lm import CorpusLMConfig
from tailtheory.engine.start.sft import SFTConfig, config_hash
from tailtheory.experiments import ladder
from tailtheory.experiments.ladder import RUNGS, facts, non_embedding_params, params, rung


def test_the_base_rung_is_the_matched_recipes_start():
    base = RUNGS[0]
    assert base.corpus() == CorpusLMConfig()
    assert config_hash(base.warm()) == config_hash(
        SFTConfig.for_task("kk_prose", task_kwargs={"n_people": 2}))


def test_the_ladder_spans_what_a_size_trend_needs():
    f = [facts(r) for r in RUNGS]
    assert len(f) >= 4 and len({r.name for r in RUNGS}) == len(RUNGS)
    assert [x["non_embedding_params"] for x in f] == sorted(x["non_embedding_params"] for x in f)
    assert f[-1]["non_embedding_params"] / f[0]["non_embedding_params"] >= 30
    assert f[-1]["params"] >= 10_000_000


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
    assert num_params(tiny_lm(base.model)) == facts(base)["params"]      # the smallest, built
    with pytest.raises(ValueError, match="unknown rung 'w9'; the ladder: base, w192"):
        rung("w9")


def _fake_builds(monkeypatch, tmp_path):
    """``corpus_lm`` and ``warm_start`` return folders holding records, as the caches do."""
    def corpus(cfg, progress, threads):
        d = tmp_path / f"corpus_{cfg.model.hidden}"
        d.mkdir(exist_ok=True)
        (d / "corpus_lm.json").write_text(json.dumps(
            {"heldout_loss": 4.0, "heldout_ppl": 54.6, "seconds": 500.0}))
        return d

    def warm(cfg, progress, threads):
        d = tmp_path / f"warm_{cfg.model.hidden}"
        d.mkdir(exist_ok=True)
        (d / "sft.json").write_text(json.dumps(
            {"accuracy": 0.4, "steps": 700, "window": [0.35, 0.7], "seconds": 1000.0}))
        return d

    monkeypatch.setattr(ladder, "corpus_lm", corpus)
    monkeypatch.setattr(ladder, "warm_start", warm)
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))


def test_build_records_each_rung_and_keeps_the_others(monkeypatch, tmp_path, capsys):
    _fake_builds(monkeypatch, tmp_path)
    assert main(["ladder", "build", "--rung", "base", "--quiet"]) == 0
    assert main(["ladder", "build", "--rung", "w192", "--quiet"]) == 0
    data = json.loads((tmp_path / "results" / "ladder.json").read_text())["data"]["rungs"]
    assert [r["rung"] for r in data] == [r.name for r in RUNGS]
    assert [r["built"] for r in data] == [True, True] + [False] * (len(RUNGS) - 2)
    assert all({"params", "non_embedding_params"} <= set(r) for r in data)
    assert data[0]["heldout_ppl"] == 54.6 and data[1]["warm_accuracy"] == 0.4
    capsys.readouterr()
    assert main(["ladder", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + len(RUNGS) and out[1].split()[-2:] == ["54.6", "0.400"]
    assert out[-1].split()[-2:] == ["-", "-"]
