"""V7 and V8 along the model-size ladder (``tailtheory/regime/size_mismatch.py``): each verdict
read from its per-rung store, on stores built to reach each per-rung verdict and a trend."""

from __future__ import annotations

import pytest

from tailtheory.engine.start.rungs import RUNGS
from tailtheory.experiments.ladder import store_rung
from tailtheory.regime import size_mismatch


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
