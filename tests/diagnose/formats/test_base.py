"""What the readers share (``tailtheory.diagnose.formats.base``): a table made a Batch with its
non-finite rows counted under the file's names, folders searched by pattern, tables opened."""

import numpy as np
import pyarrow as pa
import pytest

from tailtheory.diagnose.formats.base import (Dump, batch_of, first_found, natural, table_info,
                                              to_batch)

from ..conftest import write_jsonl


def test_batch_of_counts_nonfinite_rows_and_explodes_sequences(tmp_path):
    tbl = pa.table({"sample_id": [0, 0, 1], "position": [0, 1, 0], "token_id": [5, 6, 7],
                    "logp_train": [-1.0, None, -0.5], "logp_rollout": [-1.1, -2.0, np.inf]})
    b = batch_of(tbl, Dump(tmp_path / "x.jsonl", "jsonl", "generic", 3, ()), 4)
    assert b.file == 4 and b.ok.tolist() == [True, False, False]
    assert b.bad == {"logp_train": 1, "logp_rollout": 1}
    np.testing.assert_allclose(b.log_rho[0], 0.1)
    seq = pa.table({"sample_id": ["a"], "token_id": [[1, 2]], "logp_train": [[-1.0, -2.0]],
                    "logp_rollout": [[-1.0, -2.5]]})
    s = batch_of(seq, Dump(tmp_path / "s.jsonl", "jsonl", "generic", None, (), True), 0)
    assert s.position.tolist() == [0, 1] and s.sample_id.tolist() == ["a", "a"]


def test_to_batch_reads_the_files_own_names(tmp_path):
    tbl = pa.table({"seq": [3], "t": [2], "token": [9], "lr": [0.25]})
    b = to_batch(tbl, Dump(tmp_path / "e.parquet", "parquet", "x", 1, ()), 0, np.array([-1.0]),
                 np.array([np.nan]), {"lr": np.array([np.nan])},
                 {"sample_id": "seq", "position": "t", "token_id": "token"})
    assert b.sample_id.tolist() == [3] and b.step.tolist() == [0] and b.bad == {"lr": 1}


def test_folders_and_tables(tmp_path):
    for name in ("step_10.x", "step_2.x", "b/step_1.x"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    assert [f.name for f in natural(tmp_path.glob("*.x"))] == ["step_2.x", "step_10.x"]
    assert first_found(tmp_path, ("b/*.x", "*.x")) == [tmp_path / "b" / "step_1.x"]
    assert first_found(tmp_path, ("c/*.x",)) == []
    f = write_jsonl(tmp_path / "d.jsonl", [{"logp_train": [-1.0], "a": 1}])
    assert table_info(f) == ("jsonl", {"logp_train", "a"}, None, True)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="the dump has no rows"):
        table_info(tmp_path / "e.jsonl")
