"""Stored measurements (``tailtheory/core/measurements.py``): round trip, stale configs refused."""

from __future__ import annotations

import json

import pytest

from tailtheory.core import measurements as ms


@pytest.fixture(autouse=True)
def results(tmp_path, monkeypatch):
    monkeypatch.setenv(ms.RESULTS_ENV, str(tmp_path))
    return tmp_path


def test_thorough_measures_and_stores_quick_reads_back(results):
    calls = []

    def measure():
        calls.append(1)
        return {"x": [1.0, 2.5]}

    cfg = {"seeds": [0, 1], "lr": 2e-4}
    assert ms.measured("demo", cfg, measure, "thorough", "make it") == {"x": [1.0, 2.5]}
    assert ms.measured("demo", dict(reversed(cfg.items())), measure, "quick", "make it") == \
        {"x": [1.0, 2.5]}
    assert calls == [1]           # quick never re-measures
    record = json.loads((results / "demo.json").read_text())
    assert record["config"] == cfg and record["command"] == "make it"


def test_stale_missing_and_broken_measurements_are_refused(results):
    ms.save_measurement("demo", {"lr": 1}, {"x": 1}, "python regenerate.py")
    with pytest.raises(ms.StaleMeasurement, match="python regenerate.py"):
        ms.load_measurement("demo", {"lr": 2})
    with pytest.raises(ms.StaleMeasurement, match="no stored measurement"):
        ms.measured("other", {}, lambda: {}, "quick", "c")
    (results / "bad.json").write_text("{not json")
    with pytest.raises(ms.StaleMeasurement, match="not a stored measurement"):
        ms.load_measurement("bad", {})


def test_bad_names_and_profiles():
    with pytest.raises(ValueError, match="measurement name"):
        ms.save_measurement("../x", {}, {}, "c")
    with pytest.raises(ValueError, match="profile must be one of"):
        ms.measured("demo", {}, lambda: {}, "medium", "c")
    assert ms.fingerprint({"a": 1, "b": 2}) == ms.fingerprint({"b": 2, "a": 1})
    assert ms.fingerprint({"a": 1}) != ms.fingerprint({"a": 2})
