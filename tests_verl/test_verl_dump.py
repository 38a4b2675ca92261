"""verl dump (tailtheory/integrations/verl_dump.py) on a real ``verl.protocol.DataProto``, run by
``make test-verl`` (skipped where verl is not installed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from verl.protocol import DataProto  # noqa: E402

from tailtheory.diagnose.read import iter_batches, open_dump  # noqa: E402
from tailtheory.integrations.verl_dump import dump_batch  # noqa: E402

B, T = 4, 5


def verl_batch() -> dict:
    """Right-padded (B, T) fields as verl's driver holds them after its adv step (a copy of
    ``tests/integrations/test_verl_dump.py``'s builder, smaller: this folder runs apart)."""
    g = torch.Generator().manual_seed(0)
    mask = (torch.arange(T)[None] < torch.tensor([5, 2, 4, 1])[:, None]).long()
    old = -torch.rand(B, T, generator=g) * 3 * mask
    return {"responses": torch.randint(3, 100, (B, T), generator=g) * mask,
            "response_mask": mask, "old_log_probs": old,
            "rollout_log_probs": (old + 0.05 * torch.randn(B, T, generator=g)) * mask,
            "advantages": torch.randn(B, T, generator=g) * mask,
            "token_level_rewards": torch.rand(B, T, generator=g) * mask}


def test_dump_a_dataproto(tmp_path):
    t = verl_batch()
    uid = np.array(["a", "a", "b", "b"], dtype=object)
    proto = DataProto.from_dict(tensors=t, non_tensors={"uid": uid})
    path = dump_batch(proto, step=2, dump_dir=tmp_path)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(recs) == B and recs[0]["token_id"] == t["responses"][0].tolist()
    assert recs[1]["reward"] == pytest.approx(float(t["token_level_rewards"][1].sum()))
    (b,) = list(iter_batches(open_dump(path), 0))
    assert b.ok.all() and len(b.token_id) == int(t["response_mask"].sum())
