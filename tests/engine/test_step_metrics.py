"""The numbers of a training step no method reports (tailtheory.engine.step_metrics).

Small hand-made records: two groups of two responses, four response tokens, with values whose
means, medians and mismatch estimators (k1, k3 of ``log rho``, TRM T12) are worked out here.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from tailtheory.engine.methods import LOSS_METRICS
from tailtheory.engine.step_metrics import (METRIC_KEYS, monitor_metrics, pass_mean, rel_change,
                                            zero_variance_groups)
from tailtheory.engine.types import PolicyBatch


def test_zero_variance_groups_finds_groups_of_equal_rewards():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.1, 0.1], dtype=torch.float64)
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    assert zero_variance_groups(rewards, groups).tolist() == [True, False, True]


def _record(keep=None):
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    log_rho = torch.zeros(4, 4)
    log_rho[0, 0], log_rho[3, 3] = 0.5, -0.25
    log_rho[1, 2] = 9.0                                        # past EOS: never counted
    roll = torch.full((4, 4), -1.0)
    b = PolicyBatch(logp=roll + log_rho, old_logp=roll + log_rho, roll_logp=roll, mask=mask,
                    rewards=torch.tensor([1.0, 1.0, 0.0, 0.1], dtype=torch.float64),
                    group_ids=torch.tensor([0, 0, 1, 1]), keep=keep,
                    trm_accept=torch.tensor([True, False, True, True]))
    rewards = [SimpleNamespace(correct=c, format_ok=f)
               for c, f in ((True, True), (True, True), (False, False), (False, True))]
    stats = {"entropy": torch.full((4, 4), 2.0), "pruned_mass": torch.full((4, 4), 0.25)}
    return SimpleNamespace(b=b, rb=SimpleNamespace(mask=mask), rewards=rewards, stats=stats)


def test_monitor_metrics_of_a_hand_made_record():
    rec = _record()
    flat = zero_variance_groups(rec.b.rewards, rec.b.group_ids)
    m = monitor_metrics(rec, flat)
    assert set(m) <= set(METRIC_KEYS)
    n = 10                                                      # response tokens: 3 + 1 + 2 + 4
    assert m["reward/mean"] == pytest.approx(2.1 / 4)
    assert (m["reward/accuracy"], m["reward/format"]) == (0.5, 0.75)
    assert (m["rollout/tokens"], m["rollout/len_max"]) == (n, 4)
    assert (m["rollout/len_mean"], m["rollout/len_median"]) == (2.5, 2.0)  # torch: lower median
    assert m["policy/entropy"] == 2.0
    assert m["mismatch/abs_mean"] == pytest.approx(0.75 / n)
    assert m["mismatch/abs_max"] == 0.5
    assert m["mismatch/k1"] == pytest.approx(-0.25 / n)
    k3 = lambda r: math.expm1(r) - r  # noqa: E731
    assert m["mismatch/k3"] == pytest.approx((k3(0.5) + k3(-0.25)) / n)
    assert m["trm/accept_rate"] == 0.75
    assert m["dvp/pruned_mass"] == 0.0                         # no kept set: no pruning
    assert m["adv/zero_var_frac"] == 0.5                       # group 0 has rewards 1, 1
    pruned = monitor_metrics(_record(keep=torch.ones(4, 4, 8, dtype=torch.bool)), flat)
    assert pruned["dvp/pruned_mass"] == 0.25


def test_pass_mean_over_live_passes_grad_norm_over_all():
    def p(loss, active, gnorm):
        return {**{k: 0.0 for k in LOSS_METRICS}, "loss/policy": loss, "loss/active_frac": active,
                "grad/norm": gnorm}

    out = pass_mean([p(1.0, 0.5, 2.0), p(3.0, 0.0, 4.0), p(5.0, 0.25, 6.0)])
    assert out["loss/policy"] == 3.0 and out["loss/active_frac"] == 0.375  # passes 1 and 3
    assert out["grad/norm"] == 4.0                                          # all three
    assert pass_mean([p(1.0, 0.0, 2.0), p(3.0, 0.0, 4.0)])["loss/policy"] == 2.0  # none live
    assert pass_mean([]) == {**{k: 0.0 for k in LOSS_METRICS}, "grad/norm": 0.0}


def test_rel_change_is_the_relative_parameter_distance():
    layer = torch.nn.Linear(2, 1, bias=True)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[3.0, 0.0]]))
        layer.bias.fill_(4.0)
    before = [p.detach().clone() for p in layer.parameters()]
    assert rel_change(before, layer) == 0.0
    with torch.no_grad():
        layer.bias.add_(1.0)                                   # ||d|| = 1, ||theta|| = 5
    assert rel_change(before, layer) == pytest.approx(0.2)
    zero = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        zero.weight.zero_()
    assert rel_change([zero.weight.detach().clone()], zero) == 0.0
