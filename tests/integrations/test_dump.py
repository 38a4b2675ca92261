"""The framework-free dump writer (``tailtheory/integrations/dump.py``): records in the generic
format's sequence-row shape, masked tokens left out, non-finite values as null, shapes checked,
a dump file never overwritten unless appended to, and what it writes read back by diagnose."""

from __future__ import annotations

import json

import pytest
import torch

from tailtheory.diagnose.read import expand_dumps, iter_batches, open_dump
from tailtheory.integrations.dump import FIELDS, JsonlDump, sequence_records


def _batch():
    tok = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0], [0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    lt = torch.tensor([[-0.1, -2.0, -0.5, 0.0], [-1.0, -3.0, 0.0, 0.0], [0.0] * 4])
    lr = lt + torch.tensor([[0.01, float("nan"), -0.02, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0] * 4])
    return tok, lt, lr, mask


def test_records_keep_masked_tokens_only_and_write_nan_as_null():
    tok, lt, lr, mask = _batch()
    recs = sequence_records(tok, lt, lr, mask, step=3, sample_ids=["a", "b", "c"],
                            advantages=torch.tensor([0.5, -0.5, 0.0]),
                            rewards=torch.tensor([1.0, 0.0, 0.0]))
    assert [r["sample_id"] for r in recs] == ["a", "b"]          # "c" kept no token
    assert set(FIELDS) <= set(recs[0]) and recs[0]["step"] == 3
    assert recs[0]["position"] == [0, 1, 2] and recs[0]["token_id"] == [5, 6, 7]
    assert recs[0]["logp_rollout"][1] is None and recs[1]["position"] == [0]
    assert recs[0]["advantage"] == 0.5 and recs[1]["reward"] == 0.0
    with pytest.raises(ValueError, match="share one"):
        sequence_records(tok, lt[:, :3], lr, mask, step=0, sample_ids=[0, 1, 2])
    with pytest.raises(ValueError, match="3 responses"):
        sequence_records(tok, lt, lr, mask, step=0, sample_ids=[0, 1])


def test_a_dump_is_created_with_its_folder_never_overwritten_and_read_back(tmp_path):
    tok, lt, lr, mask = _batch()
    path = tmp_path / "dump" / "rank0.jsonl"
    dump = JsonlDump(path)
    assert dump.write(sequence_records(tok, lt, lr, mask, step=0, sample_ids=[0, 1, 2])) == 2
    with pytest.raises(FileExistsError, match="append=True"):
        JsonlDump(path)
    JsonlDump(path, append=True).write(sequence_records(tok, lt, lr, mask, step=1,
                                                        sample_ids=[0, 1, 2]))
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [0, 0, 1, 1]
    (file,) = expand_dumps([tmp_path / "dump"])
    batches = list(iter_batches(open_dump(file), 0, 1000))
    assert sum(int(b.ok.sum()) for b in batches) == 2 * 4 - 2   # the null rows are excluded
