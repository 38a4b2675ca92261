"""The prepared GPU check of V7 and V8 (``benchmarks/gpu_v7_v8.py``) runs whole on the CPU under
``--smoke``: rows for the first committed model, naming the machine, written to its folder (a
minute: ``make test-thorough``)."""

from __future__ import annotations

import json
import runpy
import sys

import pytest

from tailtheory.core.io import REPO_ROOT


@pytest.mark.slow  # make test-thorough: about a minute of V7 and V8 on the CPU
def test_the_smoke_run_writes_rows_naming_the_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gpu_v7_v8.py", "--smoke", "--out-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(REPO_ROOT / "benchmarks" / "gpu_v7_v8.py"), run_name="__main__")
    assert done.value.code == 0
    (v7,) = tmp_path.glob("v7_units_*.json")
    rows = json.loads(v7.read_text())
    (name, row), = rows.items()
    assert row["model"] == name and row["machine"] and row["n_prompts"] == 16
    assert set(row["settings"]) == {"vs_float32", "same_dtype"}
