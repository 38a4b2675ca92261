"""verl plugin (tailtheory/integrations/verl.py), run by ``make test-verl`` in ``.venv-verl``.

Every registered loss and estimator is looked up through verl's own registry
(``get_policy_loss_fn``, ``get_adv_estimator_fn``) and called on verl-shaped tensors; it must
equal the engine's function on the same numbers, and verl's own built-in where one exists.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.core_algos import (ADV_ESTIMATOR_REGISTRY,  # noqa: E402
                                         POLICY_LOSS_REGISTRY, get_adv_estimator_fn,
                                         get_policy_loss_fn)

import tailtheory.integrations.verl as plugin  # noqa: E402
from tailtheory.engine.registry import get_method  # noqa: E402
from tailtheory.engine.types import MethodParams, PolicyBatch  # noqa: E402
from tailtheory.engine.advantages import grpo_advantages  # noqa: E402

ATOL = 1e-6
"""float32 / float64 agreement of two implementations of one formula."""

AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _batch(B: int = 8, T: int = 7, seed: int = 0):
    """verl-shaped (B, T) tensors: right-padded response mask (no empty response), log-probs
    with pi_old off by up to ~0.8 nats so the clip and the dual clip bind, group uids."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    lens[0] = T
    mask = (torch.arange(T)[None] < lens[:, None]).float()
    old = torch.log(torch.rand(B, T, generator=g) * 0.9 + 0.05)
    logp = (old + 0.8 * torch.randn(B, T, generator=g)).clamp(max=-1e-3).requires_grad_(True)
    adv = torch.randn(B, T, generator=g) * mask
    index = np.array([f"uid{i // 4}" for i in range(B)], dtype=object)
    return old, logp, adv, mask, index


def _config(**kw):
    base = dict(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0,
                loss_scale_factor=None, global_batch_info={})
    return OmegaConf.create({**base, **kw})


def _engine_loss(name, old, logp, adv, mask, agg, weight=None):
    hp = MethodParams(eps_low=0.2, eps_high=0.28, clip_ratio_c=3.0, loss_agg=agg)
    b = PolicyBatch(logp=logp * mask, old_logp=old, roll_logp=old, mask=mask.bool(), adv=adv,
                    weight=weight)
    if name == "ar":
        b = PolicyBatch(**{**b.__dict__, "adv": get_method("ar").fn(b, hp)[0]})
        name = "grpo"
    return get_method(name).fn(b, hp)[0]


def _grad(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


def test_registered_through_verls_registries():
    for name in plugin.LOSSES:
        assert name in POLICY_LOSS_REGISTRY
        assert get_policy_loss_fn(name).__module__ == plugin.__name__
    for name in plugin.ESTIMATORS:
        assert get_adv_estimator_fn(name) is plugin.ESTIMATORS[name]
    for name in plugin.UNSUPPORTED:
        assert f"tail_{name}" not in POLICY_LOSS_REGISTRY
        assert f"tail_{name}" not in ADV_ESTIMATOR_REGISTRY
    assert plugin.register() == [*plugin.LOSSES, *plugin.ESTIMATORS]      # idempotent


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("loss, method", [("tail_grpo", "grpo"), ("tail_ar", "ar")])
def test_policy_loss_equals_engine(agg, loss, method):
    old, logp, adv, mask, _ = _batch()
    got, metrics = get_policy_loss_fn(loss)(old, logp, adv, mask, agg, _config())
    want = _engine_loss(method, old, logp, adv, mask, agg)
    assert torch.allclose(got, want, atol=ATOL, rtol=0)
    assert torch.allclose(_grad(got, logp), _grad(want, logp), atol=ATOL, rtol=0)
    assert metrics["tail/loss/clipfrac"] > 0


def test_dr_grpo_loss_equals_engine():
    old, logp, adv, mask, _ = _batch()
    got, _ = get_policy_loss_fn("tail_dr_grpo")(old, logp, adv, mask, "token-mean", _config())
    want = _engine_loss("dr_grpo", old, logp, adv, mask, "seq-mean-token-sum-norm")
    assert torch.allclose(got, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("dp", [1, 2])
def test_grpo_loss_equals_verls_vanilla(agg, weights, dp):
    """tail_grpo and verl's own vanilla loss (dual clip c = 3) agree, with verl's rollout-IS
    weights and with global batch counts (dp_size = 2, twice the local tokens / sequences)."""
    old, logp, adv, mask, _ = _batch(seed=3)
    w = torch.rand(mask.shape, generator=torch.Generator().manual_seed(5)) * 2 if weights else None
    info = {} if dp == 1 else {"dp_size": 2, "batch_num_tokens": int(2 * mask.sum()),
                               "global_batch_size": 2 * mask.shape[0]}
    cfg = _config(global_batch_info=info)
    got, _ = get_policy_loss_fn("tail_grpo")(old, logp, adv, mask, agg, cfg, w)
    ref, _ = get_policy_loss_fn("vanilla")(old, logp, adv, mask, agg, cfg, w)
    assert torch.allclose(got, ref, atol=ATOL, rtol=0), (got, ref)
    assert torch.allclose(_grad(got, logp), _grad(ref, logp), atol=ATOL, rtol=0)


def test_params_from_environment(monkeypatch):
    monkeypatch.setenv(plugin.PARAMS_ENV, '{"alpha": 0.9}')
    assert plugin.method_params().alpha == 0.9
    monkeypatch.setenv(plugin.PARAMS_ENV, '{"eps_low": 0.1}')
    with pytest.raises(ValueError, match="eps_low"):
        plugin.method_params()
    monkeypatch.setenv(plugin.PARAMS_ENV, '{"alpha": 3}')
    with pytest.raises(ValueError, match="alpha"):
        plugin.method_params()


def _rewards(B, T, mask, seed=1):
    g = torch.Generator().manual_seed(seed)
    r = torch.zeros(B, T)
    last = mask.sum(-1).long() - 1
    r[torch.arange(B), last] = torch.randint(0, 3, (B,), generator=g).float()  # at the last token
    return r


@pytest.mark.parametrize("ours, verls, kw", [
    ("tail_grpo", "grpo", {}),
    ("tail_dr_grpo", "grpo", {"norm_adv_by_std_in_grpo": False}),
    ("tail_rloo", "rloo", {}),
])
def test_group_estimators_equal_engine_and_verl(ours, verls, kw):
    _, _, _, mask, index = _batch()
    r = _rewards(*mask.shape, mask)
    adv, ret = get_adv_estimator_fn(ours)(token_level_rewards=r, response_mask=mask, index=index,
                                          config=None)
    ref, _ = get_adv_estimator_fn(verls)(token_level_rewards=r, response_mask=mask, index=index,
                                         config=None, **kw)
    assert adv.shape == mask.shape and torch.equal(adv, ret)
    assert torch.allclose(adv, ref, atol=ATOL, rtol=0)
    if ours == "tail_grpo":
        groups = torch.tensor([int(u[3:]) for u in index])
        assert torch.allclose(adv.double(), grpo_advantages(r.sum(-1), groups, mask.bool()),
                              atol=ATOL, rtol=0)


def test_otb_equals_verls_builtin_without_zero_tail():
    """tail_otb = verl's optimal_token_baseline at handle_zero_tail=False; with verl's default
    (True) they differ only where the longest response of a group runs alone."""
    _, _, _, mask, index = _batch(B=8, T=9, seed=2)
    g = torch.Generator().manual_seed(4)
    z = torch.randn(*mask.shape, 16, generator=g) * 2
    p = torch.softmax(z, -1)
    tok = torch.multinomial(p.reshape(-1, 16), 1, generator=g).reshape(mask.shape)
    old = torch.log(p.gather(-1, tok[..., None]).squeeze(-1)) * mask
    sp2 = (p ** 2).sum(-1)
    r = _rewards(*mask.shape, mask)
    kw = dict(token_level_rewards=r, response_mask=mask, index=index, old_log_probs=old,
              sum_pi_squared=sp2)
    adv, ret = get_adv_estimator_fn("tail_otb")(config=None, **kw)
    ref, ref_ret = get_adv_estimator_fn("optimal_token_baseline")(handle_zero_tail=False, **kw)
    assert torch.allclose(adv, ref, atol=1e-5, rtol=0) and torch.allclose(ret, ref_ret)
    with pytest.raises(ValueError, match="sum_pi_squared"):
        get_adv_estimator_fn("tail_otb")(token_level_rewards=r, response_mask=mask, index=index)
