"""Named models of the ladder and V7 on them (``tailtheory/ladder/models.py``,
``tailtheory/ladder/mismatch.py``): a label names weights, a changed file is refused, and V7's
per-model rule and intervals read what they say."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tailtheory.core.io import CACHE_ENV
from tailtheory.engine.start.warm_cache import COMMITTED, read_record
from tailtheory.ladder import mismatch, models
from tailtheory.ladder.build import build
from tailtheory.tim.precision import ratio_interval


@pytest.fixture
def places(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))
    return tmp_path


def test_a_committed_model_is_recorded_and_loads_by_its_label(places):
    build(["base"], progress=False, corpus_lms=False)
    want = read_record(COMMITTED / "base")["weights"]
    name = f"base.b0-{want[:8]}"
    row = models.read()[name]
    assert (models.committed_folder(want).name, row["corpus"], models.state(row)) == (
        "base", None, "committed")
    model, task, folder = models.load(name)
    assert folder.name == row["warm"]["key"] and task.name == "kk_prose"


def test_weights_that_are_not_the_labels_are_refused(places):
    build(["base"], progress=False, corpus_lms=False)
    name = next(iter(models.read()))
    folder = models.locate(name)                        # the cache's copy of weights/base
    other = COMMITTED / "base.b1"                      # the same rung, another build
    record = read_record(folder)
    shutil.rmtree(folder)
    shutil.copytree(other, folder)                      # another model under the same key
    (folder / "sft.json").write_text(json.dumps(record))
    with pytest.raises((ValueError, RuntimeError)):
        models.load(name)


@pytest.mark.parametrize("seed", range(3))
def test_one_bootstrap_is_the_first_rule_and_settling_meets_its_target(seed):
    rng = np.random.default_rng(seed)
    den = torch.tensor(rng.gamma(2.0, 1.0, 64))
    num = den * 40 * torch.tensor(rng.lognormal(0, 0.5, 64))
    one = mismatch.settled_interval(num, den, None)
    r, lo, hi = ratio_interval(num[:, None], den[:, None], torch.ones(64, 1))
    assert (one["ratio"], one["low"], one["high"]) == (r, lo, hi)
    settled = mismatch.settled_interval(num, den, 0.05, n_boot=500)
    assert settled["mc_sd"] <= 0.05 and settled["n_boot"] >= 500
    assert settled["low"] < settled["ratio"] < settled["high"]
    assert abs(settled["low"] - lo) < 0.1 * r          # the same interval, better settled


@pytest.mark.parametrize("intervals, verdict", [
    ({"a": (64, 40, 90), "b": (50, 33, 80)}, "HOLDS"),
    ({"a": (64, 40, 90), "b": (12.5, 7.4, 18.8)}, "REFUTED"),
    ({"a": (64, 40, 90), "b": (34, 25, 44)}, "NOT-REPRODUCED"),
    ({"a": (200, 130, 300)}, "REFUTED"),
])
def test_a_models_v7_verdict(intervals, verdict):
    assert mismatch.model_verdict(intervals) == verdict


def test_one_refuted_model_refutes_v7_and_holding_needs_four_rungs(places, monkeypatch):
    def store(rows):
        monkeypatch.setattr(mismatch, "stored_data", lambda name: rows)

    held = {"vs_float32": {"ratio": 60, "low": 40, "high": 90},
            "same_dtype": {"ratio": 60, "low": 40, "high": 90}}
    low = {**held, "same_dtype": {"ratio": 12.5, "low": 7.4, "high": 18.8}}
    rungs = ["base", "w192", "w256", "w384"]
    store({f"{r}.b0-0000000{i}": {"settings": held, "rung": r, "machine": "m"}
           for i, r in enumerate(rungs[:3])})
    assert mismatch.v7_models()["verdict"].startswith("PENDING (3 of 4")
    store({f"{r}.b0-0000000{i}": {"settings": held, "rung": r, "machine": "m"}
           for i, r in enumerate(rungs)})
    assert mismatch.v7_models()["verdict"] == "HOLDS"
    store({"base.b0-00000009": {"settings": low, "rung": "base", "machine": "m"}})
    assert mismatch.v7_models()["verdict"] == "REFUTED"


def _v7_row(rung, ratio, half=0.1, machine="m"):
    import math
    lo, hi = 10 ** (math.log10(ratio) - half), 10 ** (math.log10(ratio) + half)
    x = {"ratio": ratio, "low": lo, "high": hi}
    return {"settings": {"vs_float32": x, "same_dtype": x}, "rung": rung, "machine": machine,
            "model": f"{rung}.b0-{hash((rung, ratio)) & 0xffffffff:08x}", "verdict": "?"}


def test_a_rung_with_builds_is_judged_on_them_and_fewer_are_exploratory():
    assert mismatch.rung_v7([_v7_row("base", 60)] * 2)["verdict"] == "EXPLORATORY"
    held = mismatch.rung_v7([_v7_row("base", r) for r in (55, 64, 70)])
    assert held["verdict"] == "HOLDS"
    r, lo, hi = held["settings"]["same_dtype"]
    assert lo < r < hi and r == pytest.approx((55 * 64 * 70) ** (1 / 3))
    # builds that disagree widen the interval past the band: not judged either way
    assert mismatch.rung_v7([_v7_row("base", r) for r in (20, 60, 150)])["verdict"] == \
        "NOT-REPRODUCED"
    assert mismatch.rung_v7([_v7_row("base", r) for r in (9, 11, 12)])["verdict"] == "REFUTED"


def test_machines_are_never_pooled(monkeypatch):
    rows = {f"{i}": _v7_row(rung, ratio, machine=m) for i, (rung, ratio, m) in enumerate(
        [(r, x, "cpu") for r in ("base", "w192", "w256") for x in (50, 60, 70)]
        + [("base", 10, "gpu"), ("base", 11, "gpu"), ("base", 12, "gpu")])}
    monkeypatch.setattr(mismatch, "stored_data", lambda name: rows)
    got = mismatch.v7_units()
    assert got["cpu"]["verdict"] == "HOLDS" and got["gpu"]["verdict"] == "REFUTED"
    assert set(got["gpu"]["rungs"]) == {"base"}


def test_a_first_build_kept_under_previous_builds_stays_unrecorded(places):
    """A rung built again here moves its first build (no fingerprint) under
    ``previous_builds``: it is still listed unrecorded, beside rungs never built again; a row
    naming its warm start's weights is not."""
    from tailtheory.core.measurements import save_measurement

    first = {"cpu": "AMD EPYC (AVX2)", "heldout_ppl": 22.2, "warm_accuracy": 0.36,
             "warm_key": "k256"}
    save_measurement(models.LEGACY, {"v": 1}, {
        "base": {"cpu": "AMD EPYC (AVX2)", "heldout_ppl": 54.6, "warm_key": "kb"},
        "w256": {"cpu": "AMD EPYC (AVX512)", "heldout_ppl": 22.2, "warm_key": "k256",
                 "warm_weights": "cae5780653a13bc0", "previous_builds": [first]}},
        "tailtheory measure ladder")
    got = {(u["rung"], u["cpu"], u["heldout_ppl"]) for u in models.unrecorded()}
    assert got == {("base", "AMD EPYC (AVX2)", 54.6), ("w256", "AMD EPYC (AVX2)", 22.2)}
