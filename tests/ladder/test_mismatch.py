"""V7 and V8 along the model-size ladder (``tailtheory/ladder/mismatch.py``): each verdict
read from its per-rung store, on stores built to reach each per-rung verdict and a trend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from provenance_check import check_named
from tailtheory.core.models import tiny_lm
from tailtheory.core.provenance import cpu_model, machine, weights_fingerprint
from tailtheory.engine.start.rungs import RUNGS
from tailtheory.ladder.build import store_rung
from tailtheory.ladder import mismatch as size_mismatch


def _v7_row(*intervals):
    names = ("vs_float32", "same_dtype")
    return {"settings": {n: {"ratio": (a + b) / 2, "low": a, "high": b}
                         for n, (a, b) in zip(names, intervals)}}


def test_v7_and_v8_read_their_stores(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    names = [r.name for r in RUNGS]
    assert size_mismatch.v7_verdict()["verdict"].startswith("PENDING (0 of 4")
    rows = [((40, 60), (50, 90)), ((33, 127), (64, 70)), ((40, 60), (10, 30)),
            ((40, 60), (20, 50))]
    for name, ivs in zip(names, rows):
        store_rung("precision_ladder", name, _v7_row(*ivs), {}, "test")
    v7 = size_mismatch.v7_verdict()
    assert [x["verdict"] for x in v7["rungs"]] == ["HOLDS", "HOLDS", "REFUTED", "NOT-REPRODUCED"]
    assert v7["verdict"] == "REFUTED"
    for i, name in enumerate(names[:4]):
        store_rung("batch_shape_ladder", name, [
            {"decoder": "fast", "dtype": "bf16", "batch": 32, "over_1e3": 0.9,
             "non_embedding_params": 10 ** (6 + i)},
            {"decoder": "hf", "dtype": "bf16", "batch": 32,
             "over_1e3": 0.01 * i + 0.001 * (-1) ** i,
             "non_embedding_params": 10 ** (6 + i)}], {}, "test")
    v8 = size_mismatch.v8_trend()
    assert v8["verdict"] == "GROWS" and v8["slope"] == pytest.approx(0.0096)


# --- measuring on the rungs -----------------------------------------------------------------

@pytest.fixture(scope="module")
def model():
    return tiny_lm(vocab_size=64, hidden=32, layers=2, heads=2, kv_heads=1, seed=1)


def test_v7_on_a_rung_not_built_names_the_build(monkeypatch, tmp_path):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))   # no rung recorded
    with pytest.raises(ValueError, match="tailtheory ladder build --rung w192"):
        size_mismatch.measure_precision(["w192"])


def test_precision_rows_name_the_warm_start(monkeypatch, tmp_path, model):
    """A rung's V7 row names its warm start's key and fingerprint and the CPU (the warm start a
    tiny model, the measurement stubbed)."""
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    monkeypatch.setattr(size_mismatch, "stored", lambda: {"base": {"non_embedding_params": 1}})
    monkeypatch.setattr(size_mismatch, "warm_policy", lambda name: (model, None, Path("key")))
    monkeypatch.setattr(size_mismatch, "precision_mismatch", lambda m, task, n: {"settings": {}})
    row = size_mismatch.measure_precision(["base"])["base"]
    assert row["warm_key"] == "key" and size_mismatch.stored_data("precision_ladder")["base"] == row
    check_named(row, weights_fingerprint(model), cpu_model())


@pytest.mark.parametrize("rule", size_mismatch.V7_RULES)
def test_v7_rows_name_the_model_and_the_machine(monkeypatch, tmp_path, model, rule):
    """A named model's V7 row under either rule names its fingerprint and the machine (the model
    a tiny one, the per-response sums stubbed, the interval computed from them)."""
    from tailtheory.ladder import models

    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    name, weights = "base.b0-0910fc60", weights_fingerprint(model)
    monkeypatch.setattr(models, "read", lambda: {name: {
        "rung": "base", "build": 0, "non_embedding_params": 1, "warm": {"weights": weights}}})
    monkeypatch.setattr(models, "load", lambda label, device="cpu": (model, None, None))
    sums = {"bf16": [2.0, 3.0, 4.0], "fp16": [0.1, 0.1, 0.1]}
    monkeypatch.setattr(size_mismatch, "precision_mismatch", lambda m, task, n, per_response:
                        {"settings": {"same_dtype": {"sums": sums}}})
    size_mismatch.measure_v7([name], rule=rule)
    check_named(size_mismatch.stored_data(rule)[name], weights, machine())


# --- V8 on the ladder's rungs: what is stored ----------------------------------------------------

def _fake_rungs(monkeypatch, tmp_path, model):
    """Built rungs whose corpus LM is the tiny model and whose held-out stream is random ids."""
    from types import SimpleNamespace

    from tailtheory.ladder import build as ladder
    from tailtheory.ladder import mismatch as bs

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "corpus_lm.json").write_text("{}")
    built = lambda: {"base": {"non_embedding_params": 1},  # noqa: E731
                     "w192": {"non_embedding_params": 2}}
    monkeypatch.setattr(bs, "stored", built)
    monkeypatch.setattr(ladder, "stored", built)
    monkeypatch.setattr(bs, "corpus_root", lambda: tmp_path)
    monkeypatch.setattr(bs, "corpus_key", lambda cfg: "corpus")
    monkeypatch.setattr(bs, "load_corpus_lm", lambda path: (model, SimpleNamespace(pad_token_id=1)))
    monkeypatch.setattr(bs, "heldout_stream", lambda path: torch.randint(
        2, 64, (1000,), generator=torch.Generator().manual_seed(0)))
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))
    return bs


def test_rungs_are_stored_one_by_one(monkeypatch, tmp_path, model):
    import json

    bs = _fake_rungs(monkeypatch, tmp_path, model)
    bs.measure_batch_shape(["base"])
    bs.measure_batch_shape(["w192"])
    data = json.loads((tmp_path / "results" / "batch_shape_ladder.json").read_text())["data"]
    assert list(data) == ["base", "w192"]
    assert len(data["base"]) == 2 * 3 * 2 and data["w192"][0]["non_embedding_params"] == 2
    assert all(r["tokens"] > 1000 for r in data["base"])      # 32 windows of 16-128 tokens
    for row in data["base"]:                                  # the rung's corpus LM, the CPU
        check_named(row, weights_fingerprint(model), cpu_model())


def test_a_rung_not_built_names_the_build(monkeypatch, tmp_path, model):
    bs = _fake_rungs(monkeypatch, tmp_path, model)
    with pytest.raises(ValueError, match="tailtheory ladder build --rung w256"):
        bs.measure_batch_shape(["w256"])
