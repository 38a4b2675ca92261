"""OTB's method of the GRPO engine (``tailtheory/otb/methods.py``): the optimal token baseline
as the advantage stage, by hand and under bypass, and its registration."""

from __future__ import annotations

import pytest
import torch

from policy_batches import ATOL, HP, batch
from tailtheory.engine.registry import advantages, get_method, parse_methods, registered


def test_registered_at_the_advantage_stage_without_a_check():
    m = registered()["otb"]
    assert (m.stage, m.metrics, m.validate) == ("advantage", ("adv/abs_mean",), None)
    assert m.fn.__module__ == "tailtheory.otb.methods"


def test_otb_needs_sum_p2():
    b = batch(old_p=[[0.5]], rewards=torch.tensor([1.0]), group_ids=torch.tensor([0]))
    with pytest.raises(ValueError, match="sum_p2"):
        get_method("otb").fn(b, HP)


def test_otb_advantage_by_hand():
    """OTB: w = 1 - 2 pi + sum p^2: (1 - 1 + 0.5) = 0.5 and (1 - 0.5 + 0.375) = 0.875;
    B* = (1 * 0.5 + 0 * 0.875) / 1.375 = 4/11; A = (1 - 4/11, -4/11)."""
    b = batch(old_p=[[0.5], [0.25]], rewards=torch.tensor([1.0, 0.0]),
              group_ids=torch.tensor([0, 0]), sum_p2=torch.tensor([[0.5], [0.375]]))
    adv, _ = advantages(parse_methods("otb"), b, HP)
    torch.testing.assert_close(adv, torch.tensor([[7 / 11], [-4 / 11]], dtype=adv.dtype),
                               atol=1e-6, rtol=0)


def test_otb_under_bypass_pairs_sum_p2_with_the_trainer_logp():
    """Under bypass old_logp is the rollout's; the energy must use the trainer's log-probs, whose
    distribution sum_p2 describes: same advantages as recompute, no range error from pi_roll."""
    kw = dict(rewards=torch.tensor([1.0, 0.0]), group_ids=torch.tensor([0, 0]),
              sum_p2=torch.tensor([[0.5], [0.375]]))
    train = torch.tensor([[0.5], [0.25]], dtype=torch.float64).log()
    recompute = batch(old_p=[[0.5], [0.25]], **kw)
    # rollout put 0.9 on the first token: 0.81 > the trainer's sum p^2 of 0.5
    bypass = batch(old_p=[[0.9], [0.25]], roll_p=[[0.9], [0.25]], train_logp=train, **kw)
    a_re, _ = advantages(parse_methods("otb"), recompute, HP)
    a_by, _ = advantages(parse_methods("otb"), bypass, HP)
    torch.testing.assert_close(a_by, a_re, atol=ATOL, rtol=0)
