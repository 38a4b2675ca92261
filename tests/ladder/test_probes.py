"""The effects on named models (``tailtheory/ladder/probes.py``): one point per build, rungs
with fewer than 3 builds outside the trend, one machine per trend, Holm over the family."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from provenance_check import check_named, tiny_model
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.engine.start.rungs import RUNGS, non_embedding_params
from tailtheory.ladder import models, probes


def _models(tmp_path, builds):
    """``results/ladder_models.json`` with ``builds``: rung -> number of builds."""
    data = {}
    for r in RUNGS:
        for b in range(builds.get(r.name, 0)):
            name = f"{r.name}.b{b}-{b:08x}"
            data[name] = {"label": name, "rung": r.name, "build": b,
                          "non_embedding_params": non_embedding_params(r.model),
                          "warm": {"weights": f"{b:016x}", "key": "k"}, "corpus": None}
    (tmp_path / "ladder_models.json").write_text(json.dumps({"name": "ladder_models",
                                                             "data": data}))
    return data


@pytest.fixture
def results(monkeypatch, tmp_path):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    return tmp_path


def _probes(tmp_path, models_, value, machine="m"):
    """``results/ladder_probes.json``: every model's lopti part, 3 seeds, ``value(model, seed)``
    under every lopti key."""
    keys = [k for p, k, _, _ in probes.FAMILY.values() if p == "lopti"]
    data = {name: {"lopti": {str(s): {**{k: value(row, s) for k in keys}, "machine": machine}
                             for s in probes.SEEDS}} for name, row in models_.items()}
    (tmp_path / "ladder_probes.json").write_text(json.dumps({"name": "ladder_probes",
                                                             "data": data}))


def test_rungs_with_fewer_builds_are_exploratory(results):
    ms = _models(results, {"base": 3, "w192": 3, "w256": 3, "w384": 1})
    rng = np.random.default_rng(0)
    _probes(results, ms, lambda row, s: 0.5 + 0.1 * np.log10(row["non_embedding_params"])
            + 0.01 * rng.normal())
    fam = probes.family("m")
    l1 = fam["effects"]["L1 Spearman"]
    assert [p["rung"] for p in l1["exploratory"]] == ["w384"]
    assert l1["trend"].n_builds == 9 and l1["verdict"] == "GROWS"
    assert fam["effects"]["M7 slope"]["verdict"].startswith("PENDING")
    assert "Holm" in probes.table("m")


def test_two_rungs_of_builds_are_not_a_trend(results):
    ms = _models(results, {"base": 3, "w192": 3, "w256": 2})
    _probes(results, ms, lambda row, s: 0.5)
    assert probes.family("m")["effects"]["L1 Spearman"]["verdict"].startswith("PENDING (2 of 3")


def test_another_machines_rows_are_another_trend(results):
    ms = _models(results, {"base": 3, "w192": 3, "w256": 3})
    _probes(results, ms, lambda row, s: 0.5 + 0.01 * s)
    assert probes.family("another")["effects"]["L1 Spearman"]["builds"] == []
    assert len(probes.points("L1 Spearman", "m")) == 9


def test_a_build_measured_on_two_machines_is_refused(results):
    ms = _models(results, {"base": 1})
    _probes(results, ms, lambda row, s: 0.5)
    data = json.loads((results / "ladder_probes.json").read_text())
    data["data"]["base.b0-00000000"]["lopti"]["2"]["machine"] = "other"
    (results / "ladder_probes.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="one machine"):
        probes.points("L1 Spearman")


def test_holm_runs_over_the_whole_family(results):
    """A slope called alone at p just under 5% is not called in a family of several."""
    ms = _models(results, {"base": 3, "w192": 3, "w256": 3})
    rng = np.random.default_rng(3)
    noise = {name: rng.normal() for name in ms}
    _probes(results, ms, lambda row, s: 0.5 + 0.02 * np.log10(row["non_embedding_params"])
            + 0.02 * noise[row["label"]] + 0.001 * s)
    fam = probes.family("m")["effects"]
    for effect, r in fam.items():
        if "holm" in r:
            assert r["holm"].p_adjusted >= r["trend"].p
            assert r["holm"].family_size == len(probes.FAMILY)


def test_log_effects_refuse_a_zero_share(results):
    ms = _models(results, {"base": 3, "w192": 3, "w256": 3})
    data = {name: {"p4": {str(s): {"p4_removed": 0.0, "machine": "m"} for s in probes.SEEDS}}
            for name in ms}
    (results / "ladder_probes.json").write_text(json.dumps({"name": "ladder_probes",
                                                            "data": data}))
    assert probes.family("m")["effects"]["P4 removed"]["verdict"].startswith("NOT JUDGED")


# --- what the measuring functions store: the model and the machine of every row ----------------

def test_probe_rows_name_the_model_and_the_machine(results, monkeypatch):
    """Each (model, part, seed) row names the fingerprint of the model loaded and the machine
    (the model a tiny one, the part stubbed)."""
    model = tiny_model(3)
    monkeypatch.setattr(probes.models, "load", lambda name: (model, None, None))
    monkeypatch.setattr(probes, "MEASURE", {"tail": lambda m, t, s: {"m7_slope": float(s)}})
    probes.measure_probes(["base.b0-0910fc60"], parts=("tail",), seeds=(1, 2), progress=False)
    rows = probes.read()["base.b0-0910fc60"]["tail"]
    assert set(rows) == {"1", "2"}
    for row in rows.values():
        check_named(row, weights_fingerprint(model), machine())


def test_v8_rows_name_the_corpus_lm_and_the_machine(results, monkeypatch):
    """A model's V8 entry names its corpus LM (``corpus_weights``) and the machine (the corpus LM
    a tiny one, the batch-shape measurement stubbed)."""
    model = tiny_model(3)
    built = _models(results, {"base": 1})
    name = next(iter(built))
    built[name]["corpus"] = {"key": "corpus", "weights": weights_fingerprint(model)}
    (results / "ladder_models.json").write_text(json.dumps({"name": "ladder_models",
                                                            "data": built}))
    monkeypatch.setattr(probes, "load_corpus_lm", lambda path: (
        model, SimpleNamespace(pad_token_id=1)))
    monkeypatch.setattr(probes, "heldout_stream", lambda path: torch.arange(2, 2000) % 60 + 2)
    monkeypatch.setattr(probes, "batch_shape_mismatch", lambda m, seqs, pad_id: [
        {"decoder": "hf", "dtype": "bf16", "batch": 32, "over_1e3": 0.01}])
    probes.measure_v8([name])
    check_named(probes.read(probes.V8_STORE)[name], weights_fingerprint(model), machine())


@pytest.mark.parametrize("k, n", [(0, 2103), (13, 2103), (5, 5), (1, 10)])
def test_a_share_comes_with_its_exact_interval(k, n):
    from scipy import stats

    lo, hi = probes.share_interval(k, n)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert (lo, hi) == (pytest.approx(ci.low, abs=1e-12), pytest.approx(ci.high, abs=1e-12))
    assert lo <= k / n <= hi


@pytest.mark.parametrize("k, n", [(-1, 5), (6, 5), (1, 0), (0.5, 4)])
def test_a_share_that_is_no_count_is_refused(k, n):
    with pytest.raises(ValueError):
        probes.share_interval(k, n)
