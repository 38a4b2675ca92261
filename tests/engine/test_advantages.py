"""GRPO's group advantages (``tailtheory/engine/advantages.py``): GRPO, Dr. GRPO and RLOO against
loops over their definitions, groups of one and the input rules; the module pulls in no paper
section."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given

from strategies import grouped_batches
from tailtheory.engine.advantages import (GRPO_EPS, alive_mask, dr_grpo_advantages, group_index,
                                          grpo_advantages, rloo_advantages)

R3 = torch.tensor([1.0, 0.0, 1.0])
M3 = torch.ones(3, 2, dtype=torch.bool)


def _group_loop(R, gid, mask, kind):
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for i in range(len(R)):
        g = [float(R[j]) for j in range(len(R)) if gid[j] == gid[i]]
        mean = sum(g) / len(g)
        if kind == "grpo":
            a = (float(R[i]) - mean) / (np.std(g, ddof=1) + GRPO_EPS)
        elif kind == "dr_grpo":
            a = float(R[i]) - mean
        else:
            a = float(R[i]) - (sum(g) - float(R[i])) / (len(g) - 1)
        out[i] = a * mask[i]
    return out


@given(grouped_batches())
def test_group_estimators_equal_loops(batch):
    R, gid, mask, _ = batch
    for name, fn in [("grpo", grpo_advantages), ("dr_grpo", dr_grpo_advantages),
                     ("rloo", rloo_advantages)]:
        assert torch.allclose(fn(R, gid, mask), _group_loop(R, gid, mask, name), atol=1e-9)


def test_group_of_one():
    """GRPO with std and RLOO raise; Dr. GRPO gives 0 (documented)."""
    gid = torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="single response"):
        grpo_advantages(R3, gid, M3)
    with pytest.raises(ValueError, match="single response"):
        rloo_advantages(R3, gid, M3)
    assert (dr_grpo_advantages(R3, gid, M3)[2] == 0).all()


def test_equal_rewards_give_zero_grpo():
    A = grpo_advantages(torch.ones(4), torch.zeros(4), torch.ones(4, 2, dtype=torch.bool))
    assert (A == 0).all()


# --- input rules -------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [grpo_advantages, dr_grpo_advantages, rloo_advantages])
@pytest.mark.parametrize("kwargs, match", [
    (dict(group_ids=torch.tensor([0, 0])), "group_ids"),
    (dict(mask=torch.ones(2, 2, dtype=torch.bool)), "mask"),
    (dict(mask=torch.zeros(3, 2, dtype=torch.bool)), "selects no"),
    (dict(rewards=torch.tensor([1.0, float("nan"), 0.0])), "NaN"),
    (dict(mask=torch.ones(3, dtype=torch.bool)), "mask"),
])
def test_advantages_bad_input(fn, kwargs, match):
    args = dict(rewards=R3, group_ids=torch.tensor([0, 0, 1]), mask=M3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fn(**args)


@pytest.mark.parametrize("eps", [-1e-6, -1.0, float("nan"), float("inf")])
def test_grpo_rejects_bad_eps(eps):
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        grpo_advantages(torch.tensor([0.0, 1.0]), [0, 0], torch.ones(2, 1, dtype=torch.bool),
                        eps=eps)


def test_masks_select_and_never_weight():
    R, gid = torch.tensor([0.0, 1.0, 1.0, 0.5]), [0, 0, 1, 1]
    m = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    want = grpo_advantages(R, gid, m.bool())
    assert torch.equal(grpo_advantages(R, gid, m), want)
    assert torch.equal(grpo_advantages(R, gid, m.double()), want)
    with pytest.raises(ValueError, match="mask must be a bool tensor, or a numeric one"):
        grpo_advantages(R, gid, m * 0.5)
    with pytest.raises(ValueError, match=r"mask must have shape \(B, T\) with B = 4, the length "
                                         r"of rewards"):
        rloo_advantages(torch.zeros(4), [0, 0, 1, 1], torch.ones(3, 2, dtype=torch.bool))


def test_alive_mask_and_group_index_take_any_labels():
    """Numpy masks become bool tensors; string labels are grouped like integers."""
    assert alive_mask(np.ones((2, 3))).dtype == torch.bool
    inv, counts = group_index(np.array(["b", "a", "b"]), 3)
    assert inv.tolist() == [1, 0, 1] and counts.tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"group_ids must have shape \(2,\)"):
        group_index([0, 0, 1], 2)


def test_engine_estimators_need_no_paper_section():
    """Importing the group advantages pulls in no section."""
    code = ("import sys, tailtheory.engine.advantages; "
            "print(sorted(m for m in sys.modules if m.startswith('tailtheory.') "
            "and m.split('.')[1] not in ('core', 'engine')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["[]"]
