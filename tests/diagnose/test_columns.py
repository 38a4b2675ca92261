"""The columns of a dump (``tailtheory.diagnose.columns``): types and top-k lists checked, each
refusal one clear line."""

from .conftest import write_jsonl
from .test_read import GOOD, _fails, _parquet


def test_wrong_types_and_overfull_topk(capsys, tmp_path):
    rows = [dict(r, position=str(r["position"])) for r in GOOD]
    _fails(capsys, tmp_path, _parquet(tmp_path / "w.parquet", rows),
           match="column position must hold integers")
    tok = [dict(GOOD[0], topk_logp_rollout=[-0.1, -0.2])]            # mass 1.72 > 1
    _fails(capsys, tmp_path, write_jsonl(tmp_path / "t.jsonl", tok),
           match="topk_logp_rollout holds more than probability 1")
