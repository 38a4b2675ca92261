"""The generic format (``tailtheory.diagnose.formats.generic``): the fallback reader, its files in
a folder, its checks by shape, its top-k lists measured."""

import pytest

from tailtheory.diagnose.formats import get_reader, search_order
from tailtheory.diagnose.formats.generic import READER, REQUIRED, check, find, required

from ..conftest import write_jsonl
from ..test_read import GOOD


def test_generic_is_the_fallback(tmp_path):
    assert get_reader("generic") is READER and search_order()[-1] is READER
    assert READER.fallback and READER.tabular and READER.required == REQUIRED
    assert required(True) == tuple(c for c in REQUIRED if c != "position")
    for name in ("b.jsonl", "a.parquet", "c.txt"):
        (tmp_path / name).write_text("")
    assert [f.name for f in find(tmp_path)] == ["a.parquet", "b.jsonl"]


def test_check_by_shape(tmp_path):
    rows = [dict(r, topk_logp_rollout=[-0.1, -3.0, -4.0]) for r in GOOD]
    d = check(write_jsonl(tmp_path / "t.jsonl", rows))
    assert (d.kind, d.topk, d.topk_k, d.seq_rows) == ("generic", ("topk_logp_rollout",), 3, False)
    seq = [dict(sample_id=0, token_id=[1, 2], logp_train=[-1.0, -2.0], logp_rollout=[-1.0, -2.0])]
    assert check(write_jsonl(tmp_path / "s.jsonl", seq)).seq_rows          # position optional
    with pytest.raises(ValueError, match="missing column.s. token_id .*formats read are generic"):
        check(write_jsonl(tmp_path / "m.jsonl", [{k: v for k, v in GOOD[0].items()
                                                  if k != "token_id"}]))
