"""The step's plan and the first pass of a micro-batch update that needs no pi_old value."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from tailtheory.engine.config import TrainConfig  # noqa: E402
from tailtheory.engine.types import PolicyBatch  # noqa: E402
from tailtheory.engine.update_plan import (first_pass_gradient, first_pass_known,  # noqa: E402
                                           pass_loss, plan_step)

MICRO = dict(model="tiny", update_memory="micro-batch", micro_batch=2, device="cpu")


@pytest.mark.parametrize("kw, known", [
    ({}, True),
    ({"method": "dr_grpo"}, True),
    ({"method": "grpo", "clip_ratio_c": 3.0, "filter_zero_var": True}, True),
    ({"update_memory": "batch"}, False),                  # a kept graph: nothing to save
    ({"pi_old": "bypass"}, False),                        # the ratio is pi_train / pi_roll
    ({"method": "ar"}, False),                            # weights read pi_old
    ({"method": "lopti"}, False),                         # passes read pi_old
    ({"method": "otb"}, False),                           # the baseline reads sum p^2
    ({"method": "grpo+tis"}, False),                      # the weight reads pi_train / pi_roll
    ({"method": "grpo+dvp"}, False),                      # the vocabulary stage
])
def test_first_pass_known_only_where_the_gradient_reads_no_log_prob(kw, known):
    assert first_pass_known(TrainConfig(**{**MICRO, **kw})) is known


def _batch(seed: int, B: int = 6, T: int = 5, groups: int = 3) -> PolicyBatch:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    logp = (-torch.rand(B, T, generator=g) * 4).masked_fill(~mask, 0.0)
    return PolicyBatch(logp=logp, old_logp=logp, roll_logp=logp, mask=mask, train_logp=logp,
                       rewards=torch.rand(B, generator=g, dtype=torch.float64),
                       group_ids=torch.arange(groups).repeat_interleave(B // groups))


@pytest.mark.parametrize("kw", [{}, {"method": "dr_grpo"},
                                {"clip_ratio_c": 3.0, "filter_zero_var": True}])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_pass_gradient_is_the_gradient_at_the_steps_own_log_probs(kw, seed):
    """At pi_old the ratio is 1 whatever the log-probs are: the gradient taken before the
    forward (log-probs all 0) is the one at the step's own log-probs, and so are the metrics."""
    cfg = TrainConfig(**{**MICRO, **kw})
    b = _batch(seed)
    if cfg.filter_zero_var:  # one flat group, so the loss mask differs from the mask
        b = replace(b, rewards=b.rewards.index_fill(0, torch.tensor([0, 1]), 0.5))
    grad, metrics = first_pass_gradient(b.mask, b.rewards, b.group_ids, cfg, step=0)
    planned, groups, _, loss_mask, _ = plan_step(b, cfg)
    logp = b.old_logp.clone().requires_grad_()
    loss, want = pass_loss(replace(planned, active=groups[0][1], mask=loss_mask), cfg, 0, logp)
    loss.backward()
    assert logp.grad.abs().max() > 0
    torch.testing.assert_close(grad, logp.grad, rtol=0, atol=1e-12)
    assert metrics.keys() == want.keys()
    for k, v in want.items():
        assert metrics[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
    if cfg.filter_zero_var:
        assert (grad[:2] == 0).all() and (loss_mask[:2] == 0).all()


def test_first_pass_gradient_refuses_a_loss_that_reads_pi_old():
    b = _batch(0)
    with pytest.raises(ValueError, match="reads pi_old's log-probs"):
        first_pass_gradient(b.mask, b.rewards, b.group_ids,
                            TrainConfig(**MICRO, method="ar"), step=0)
