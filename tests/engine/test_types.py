"""The batch a method reads (``tailtheory.engine.types``): the mismatch log-ratio in both
``pi_old`` modes, detached and computed once per batch; the parameters frozen."""

import dataclasses

import pytest
import torch

from tailtheory.engine.types import MethodParams, PolicyBatch


def _batch(**kw) -> PolicyBatch:
    roll = torch.tensor([[-1.0, -2.0, -0.5]])
    train = roll + torch.tensor([[0.1, -0.2, 0.0]])
    return PolicyBatch(logp=train.clone().requires_grad_(), old_logp=train, roll_logp=roll,
                       mask=torch.ones(1, 3, dtype=torch.bool), **kw)


def test_log_rho_is_train_over_roll_in_both_modes():
    recompute = _batch()                                    # pi_old = pi_train
    assert torch.equal(recompute.log_rho, recompute.old_logp - recompute.roll_logp)
    bypass = dataclasses.replace(recompute, old_logp=recompute.roll_logp,
                                 train_logp=recompute.old_logp)   # pi_old = pi_roll
    assert torch.equal(bypass.log_rho, recompute.log_rho)
    assert not (bypass.old_logp - bypass.roll_logp).any()   # the naive difference would be 0


def test_log_rho_is_detached_and_computed_once_per_batch():
    b = dataclasses.replace(_batch(), old_logp=_batch().logp)   # a differentiable pi_old
    assert not b.log_rho.requires_grad and b.log_rho is b.log_rho
    shifted = dataclasses.replace(b, roll_logp=b.roll_logp - 1.0)
    torch.testing.assert_close(shifted.log_rho, b.log_rho + 1.0)


def test_method_params_are_frozen_defaults():
    hp = MethodParams()
    assert (hp.eps_low, hp.eps_high, hp.alpha, hp.eta) == (0.2, 0.24, 0.3, 0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hp.alpha = 0.0
