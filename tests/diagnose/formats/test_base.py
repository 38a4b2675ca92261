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


def test_each_format_names_its_precision_and_what_it_lacks(tmp_path):
    """Every reader's opened file says how it stores its log-probs (what ``--bar 0`` means for
    it) and which of the sometimes-given generic columns (``step``, ``logged_ratio``) it lacks;
    a logged ratio is read as ``Batch.logged_ratio`` and never excludes a row."""
    import pyarrow.parquet as pq

    from tailtheory.diagnose.formats.base import arrow_precision
    from tailtheory.diagnose.read import iter_batches, open_dump

    from ..planted import engine_dump, planted_responses
    from .framework_dumps import nemo_rl_dump, prime_rl_dump, slime_dump

    resps = planted_responses(steps=(1,), seed=0, decimals=None)
    rows = pa.table({"sample_id": [0, 1], "position": [0, 0], "token_id": [5, 6],
                     "logp_train": pa.array([-1.0, -2.0], pa.float32()),
                     "logp_rollout": [-1.1, -2.0], "logged_ratio": [float("nan"), 1.5]})
    pq.write_table(rows, tmp_path / "g.parquet")
    pq.write_table(rows.drop_columns(["logged_ratio"]).append_column("step", pa.array([1, 1])),
                   tmp_path / "s.parquet")
    opened = {
        "generic": open_dump(tmp_path / "g.parquet"),
        "generic+step": open_dump(tmp_path / "s.parquet"),
        "jsonl": open_dump(write_jsonl(tmp_path / "g.jsonl", rows.to_pylist())),
        "engine": open_dump(next((engine_dump(tmp_path / "e", resps) / "tokens").iterdir())),
        "nemo-rl": open_dump(next(nemo_rl_dump(tmp_path / "n", resps).iterdir())),
        "prime-rl": open_dump(next((prime_rl_dump(tmp_path / "p", resps, ranks=1, ratio=True)
                                    / "token_exports").rglob("*.jsonl"))),
        "prime-rl old": open_dump(next((prime_rl_dump(tmp_path / "q", resps, ranks=1)
                                        / "token_exports").rglob("*.jsonl"))),
        "slime": open_dump(next((slime_dump(tmp_path / "l", resps) / "train_data").iterdir()))}
    got = {k: (d.precision, d.lacks) for k, d in opened.items()}
    assert got == {
        "generic": ("logp_train float32, logp_rollout float64 as stored", ("step",)),
        "generic+step": ("logp_train float32, logp_rollout float64 as stored",
                         ("logged_ratio",)),
        "jsonl": ("JSON-rounded decimals", ("step",)),
        "engine": ("float64 as stored", ()),
        "nemo-rl": ("JSON-rounded decimals", ("logged_ratio",)),
        "prime-rl": ("JSON-rounded decimals", ()),
        "prime-rl old": ("JSON-rounded decimals", ("logged_ratio",)),
        "slime": ("float32 as stored", ("logged_ratio",))}
    b = next(iter_batches(opened["generic"], 0))
    assert b.ok.tolist() == [True, True] and np.isnan(b.logged_ratio[0]) and \
        b.logged_ratio[1] == 1.5
    p = next(iter_batches(opened["prime-rl"], 0))
    np.testing.assert_allclose(np.log(p.logged_ratio), p.log_rho, rtol=1e-12)
    assert arrow_precision(pa.schema([("a", pa.list_(pa.float16()))]), ["a"]) == \
        "float16 as stored"
