"""What the framework readers share (``tailtheory.diagnose.formats.records``): records checked
key by key, renamed into the generic names, gathered into batches without splitting a
response."""

import numpy as np
import pytest

from tailtheory.diagnose.formats.base import Dump
from tailtheory.diagnose.formats.records import (check_first_line, float_array, int_array,
                                                 record_batches, same_length, scalar, to_generic)

from ..conftest import write_jsonl


def test_arrays_checked_and_named(tmp_path):
    assert int_array([1.0, 2], "f", "line 1", "ids").dtype == np.int64
    with pytest.raises(ValueError, match="f line 1: ids must hold integers"):
        int_array([1.5], "f", "line 1", "ids")
    with pytest.raises(ValueError, match="lp must hold numbers"):
        float_array(["x"], "f", "line 2", "lp")
    with pytest.raises(ValueError, match="one per token"):
        float_array([[1.0, 2.0]], "f", "line 2", "lp")
    with pytest.raises(ValueError, match="a 2, b 3"):
        same_length({"a": [1, 2], "b": [1, 2, 3]}, "f", "line 3")
    assert scalar([[4]]) == 4


def test_renamed_and_gathered(tmp_path):
    names = {"lp": "logp_train", "roll": "logp_rollout", "ids": "token_id", "i": "sample_id"}
    parts = [to_generic(names, dict(lp=np.full(n, -1.0), roll=np.full(n, -1.5), ids=np.arange(n),
                                    i=f"r{n}", position=np.arange(n)), n) for n in (3, 4, 2)]
    assert parts[0]["sample_id"].tolist() == ["r3"] * 3
    batches = list(record_batches(parts, Dump(tmp_path / "f", "jsonl", "x", None, ()), 0, 5))
    assert [len(b.ok) for b in batches] == [7, 2]                         # 3 + 4, then 2
    np.testing.assert_allclose(batches[0].log_rho, 0.5)


def test_first_line_checked(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"x": 1}])
    with pytest.raises(ValueError, match="not a fw dump: line 1 lacks y, z!"):
        check_first_line(f, "fw", ("x", "y", "z"), lambda missing: "!")
    assert check_first_line(f, "fw", ("x",), str).kind == "fw"
    with pytest.raises(ValueError, match="a fw dump is a .jsonl file"):
        check_first_line(tmp_path / "a.parquet", "fw", ("x",), str)
