"""verl dump (tailtheory/integrations/verl_dump.py) on batches built from plain tensors, shaped as
verl 0.9.1's driver holds them after its adv step; no verl import (``tests_verl/`` repeats it on
a real ``DataProto``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tailtheory.diagnose.read import expand_dumps, iter_batches, open_dump
from tailtheory.integrations.verl_dump import batch_records, dump_batch

B, T = 6, 7


def verl_batch(seed: int = 0) -> dict:
    """Right-padded (B, T) responses, their mask, the actor's and the rollout's log-probs (off by
    a little), per-token advantages and an outcome reward on the last response token."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([7, 3, 5, 1, 7, 4])
    mask = (torch.arange(T)[None] < lens[:, None]).long()
    old = -torch.rand(B, T, generator=g) * 4 * mask
    roll = (old + 0.05 * torch.randn(B, T, generator=g)) * mask
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), lens - 1] = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.5, 1.0])
    return {"responses": torch.randint(3, 100, (B, T), generator=g) * mask,
            "response_mask": mask, "old_log_probs": old, "rollout_log_probs": roll,
            "advantages": torch.randn(B, T, generator=g) * mask, "token_level_rewards": rewards,
            "attention_mask": torch.cat([torch.ones(B, 3, dtype=torch.long), mask], 1)}


def test_dump_batch_writes_the_generic_format_and_diagnose_reads_it(tmp_path):
    t = verl_batch()
    proto = SimpleNamespace(batch=t, non_tensor_batch={"uid": np.array(["a"] * 3 + ["b"] * 3)})
    path = dump_batch(proto, step=3, dump_dir=tmp_path / "dump")
    assert path == tmp_path / "dump" / "step_000003.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    mask = t["response_mask"].bool()
    assert [r["sample_id"] for r in recs] == [f"3-{i}" for i in range(B)]
    for i, r in enumerate(recs):
        assert r["step"] == 3 and r["position"] == list(range(int(mask[i].sum())))
        assert r["token_id"] == t["responses"][i][mask[i]].tolist()
        assert r["logp_train"] == pytest.approx(t["old_log_probs"][i][mask[i]].tolist())
        assert r["logp_rollout"] == pytest.approx(t["rollout_log_probs"][i][mask[i]].tolist())
        assert r["advantage"] == pytest.approx(t["advantages"][i][mask[i]].tolist())
        assert r["reward"] == pytest.approx(float(t["token_level_rewards"][i].sum()))
    (f,) = expand_dumps([tmp_path / "dump"])
    dump = open_dump(f)
    (b,) = list(iter_batches(dump, 0))
    assert dump.seq_rows and len(b.token_id) == int(mask.sum()) and b.ok.all()
    want = (t["old_log_probs"] - t["rollout_log_probs"])[mask].numpy()
    assert np.allclose(b.log_rho, want, atol=1e-6)
    assert b.reward is not None and b.advantage is not None
    with pytest.raises(FileExistsError, match="append=True"):
        dump_batch(t, step=3, dump_dir=tmp_path / "dump")


def test_jagged_tensors_and_attention_mask():
    """Per-response (jagged) tensors, as verl's transfer queue stores them, are padded; without
    response_mask the response part of attention_mask is used."""
    t = verl_batch()
    mask = t["response_mask"].bool()
    want = batch_records(t, step=0)
    jagged = {k: torch.nested.as_nested_tensor([v[i][mask[i]] for i in range(B)],
                                                layout=torch.jagged)
              for k, v in t.items() if k != "attention_mask"}
    assert batch_records(jagged, step=0) == want
    no_mask = {k: v for k, v in t.items() if k != "response_mask"}
    assert batch_records(no_mask, step=0) == want


@pytest.mark.parametrize("change, match", [
    (lambda t: t.pop("rollout_log_probs"), "calculate_log_probs=True"),
    (lambda t: t.update(rollout_log_probs=t["old_log_probs"].clone()), "bypass_mode=False"),
    (lambda t: t.pop("old_log_probs"), "old_log_prob"),
    (lambda t: [t.pop("response_mask"), t.pop("attention_mask")], "response_mask"),
])
def test_loud_failures(tmp_path, change, match):
    t = verl_batch()
    change(t)
    with pytest.raises(ValueError, match=match):
        dump_batch(t, step=1, dump_dir=tmp_path)
    assert not list(tmp_path.iterdir())
