"""Bad dumps refused while they are read (``tailtheory.diagnose.read``): one clear line, exit
status 2, and no report written."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tailtheory.cli import main
from tailtheory.core.estimators import k1

from .conftest import engine_frame, write_jsonl

GOOD = [dict(sample_id=s, position=t, token_id=t, logp_train=-1.0 - 0.1 * t,
             logp_rollout=-1.0 - 0.1 * t + 0.01 * (-1) ** t) for s in range(4) for t in range(5)]


def _fails(capsys, tmp_path, *args, match: str) -> str:
    """Run diagnose, expect exit 2 with ``match`` in its one stderr line and nothing written."""
    out = tmp_path / "report"
    assert main(["diagnose", *map(str, args), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tailtheory: error: ") and len(err.splitlines()) == 1, err
    assert match in err, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.")]
    return err


def _parquet(path, records, **kw):
    pq.write_table(pa.Table.from_pylist(records), path, **kw)
    return path


def test_missing_columns_are_named(capsys, tmp_path):
    f = _parquet(tmp_path / "d.parquet", [{k: v for k, v in r.items()
                                           if k not in ("logp_rollout", "token_id")} for r in GOOD])
    err = _fails(capsys, tmp_path, f, match="missing column(s) token_id, logp_rollout")
    assert str(f) in err
    g = write_jsonl(tmp_path / "d.jsonl", GOOD[:3] + [{"sample_id": 9, "position": 0}])
    _fails(capsys, tmp_path, g, match="record 4 lacks column(s) token_id, logp_train")


def test_nonfinite_rows_excluded_counted_or_refused(capsys, tmp_path, engine_run):
    """NaN / +inf log-probs: named and counted; excluded (never averaged in) when few, an error
    when more than --max-excluded."""
    df = engine_frame(engine_run)
    df.loc[[0, 5, 9], "log_rho"] = np.nan
    df.loc[[12], "logp_roll"] = np.inf
    (tmp_path / "tokens").mkdir()
    df.to_parquet(tmp_path / "tokens" / "step_000000.parquet", index=False)
    _fails(capsys, tmp_path, tmp_path / "tokens", match=f"4 of {len(df)} rows")
    out = tmp_path / "ok"
    assert main(["diagnose", str(tmp_path / "tokens"), "--out", str(out), "--quiet",
                 "--max-excluded", "0.05"]) == 0
    assert f"warning: 4 of {len(df)} rows" in capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    assert s["excluded_rows"] == 4 and s["tokens"] == len(df) - 4
    assert s["excluded_by_column"] == {"log_rho": 3, "logp_roll": 1}
    finite = df.log_rho.notna() & np.isfinite(df.logp_roll)
    assert s["k1"] == pytest.approx(float(k1(torch.tensor(df.log_rho[finite].to_numpy())).mean()),
                                    rel=1e-9)
    assert s["excluded_sequences"] == df[~finite].groupby(["step", "seq"]).ngroups
    assert s["sequences"] == df.groupby(["step", "seq"]).ngroups - s["excluded_sequences"]


def test_mismatched_lengths(capsys, tmp_path):
    seq = [dict(sample_id=0, token_id=[1, 2, 3], logp_train=[-1.0, -2.0, -0.5],
                logp_rollout=[-1.0, -2.1])]
    _fails(capsys, tmp_path, write_jsonl(tmp_path / "s.jsonl", seq),
           match="(sample_id 0): logp_rollout has 2 entries but logp_train has 3")
    tok = [dict(GOOD[0], topk_logp_rollout=[-0.5, -1.0], topk_logp_train=[-0.5, -1.1, -3.0])]
    _fails(capsys, tmp_path, write_jsonl(tmp_path / "t.jsonl", tok),
           match="topk_logp_rollout and topk_logp_train have different lengths")


def test_repeated_positions(capsys, tmp_path):
    rows = GOOD + [dict(GOOD[7], token_id=99)]                     # sample 1, position 2 again
    f = _parquet(tmp_path / "r.parquet", rows)
    _fails(capsys, tmp_path, f, match="sample_id 1 (step 0): position 2 repeats")
    # across batches (one row at a time) the repeat is caught by counting
    err = _fails(capsys, tmp_path, f, "--batch-rows", "1", match="a position repeats")
    assert "sample_id 1" in err


@pytest.mark.parametrize("kind", ["zero_bytes", "no_rows", "empty_jsonl", "png", "suffix",
                                  "not_json", "missing", "empty_dir"])
def test_unreadable_inputs(capsys, tmp_path, kind):
    if kind == "zero_bytes":
        f = tmp_path / "e.parquet"
        f.write_bytes(b"")
        match = "not a readable parquet file"
    elif kind == "no_rows":
        f = _parquet(tmp_path / "e.parquet", [GOOD[0]])
        pq.write_table(pq.read_table(f).slice(0, 0), f)
        match = "the dump has no rows"
    elif kind == "empty_jsonl":
        f = tmp_path / "e.jsonl"
        f.write_text("\n\n")
        match = "the dump has no rows"
    elif kind == "png":                                        # a figure renamed .parquet
        f = tmp_path / "fig.parquet"
        f.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
        match = "not a readable parquet file"
    elif kind == "suffix":
        f = tmp_path / "d.csv"
        pd.DataFrame(GOOD).to_csv(f)
        match = "unknown dump format '.csv'"
    elif kind == "not_json":
        f = tmp_path / "d.jsonl"
        f.write_text(json.dumps(GOOD[0]) + "\n{oops\n")
        match = "line 2: not JSON"
    elif kind == "missing":
        f, match = tmp_path / "nowhere.parquet", "no such file or directory"
    else:
        f = tmp_path / "empty"
        f.mkdir()
        match = "no dumps in this folder"
    err = _fails(capsys, tmp_path, f, match=match)
    assert str(f) in err
