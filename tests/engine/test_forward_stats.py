"""The trainer's forward over a rollout batch (tailtheory.engine.forward_stats).

A tiny Qwen2-style LM samples a batch of prompts of different lengths (left padding) on the
``kv`` path. Micro-batches of rows of similar length, each trimmed to its own longest row, give
the whole-batch forward's statistics up to float32 rounding (reduction order: ``1e-5`` relative
to the largest entry), bitwise the same from one call to the next, and gradients through the
same graph pieces.
"""

from dataclasses import replace

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.forward_stats import (TrainingDiverged, backward_by_micro_batch,
                                             batch_rows, check_finite, forward_stats, pad_t,
                                             slice_bt, wants_exact_kl)
from tailtheory.engine.policy_forward import response_logits
from tailtheory.engine.rollout.engine import RolloutConfig, RolloutEngine

V, EOS, PAD = 256, 1, 0
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [15], [16, 17], [18, 19, 20, 21]]
TOL = 1e-5


@pytest.fixture(scope="module")
def model():
    return tiny_lm(vocab_size=V, hidden=32, layers=1, heads=2, kv_heads=1, seed=0).eval()


@pytest.fixture(scope="module")
def rb(model):
    eng = RolloutEngine(model, RolloutConfig(path="kv", max_new_tokens=6))
    out = eng.generate(PROMPTS, eos_id=EOS, pad_id=PAD, generator=torch.Generator().manual_seed(0))
    assert out.attention_mask.sum(1).unique().numel() > 1  # rows of different lengths
    return out


def _cfg(micro_batch: int, **kw) -> TrainConfig:
    return TrainConfig(model="tiny", micro_batch=micro_batch, **kw)


def _close_on(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> None:
    a, b = a[mask].detach(), b[mask].detach()
    torch.testing.assert_close(a, b, rtol=0, atol=TOL * max(1.0, float(b.abs().max())))


def test_batch_rows_drops_left_padding_and_columns_past_eos(model, rb):
    """The trimmed rows' logits are the full batch's on every response token they keep."""
    rows = torch.tensor([1, 3])                                 # the two shortest prompts
    lens = rb.mask.sum(-1)
    p, t = int(rb.prompt_lens[rows].max()), int(lens[rows].max())
    sub = batch_rows(rb, rows, p, t)
    assert sub.prompt_len == p and sub.input_ids.shape == (2, p + max(t, 1))
    assert torch.equal(sub.response, rb.response[rows, :t])
    assert torch.equal(sub.prompt_lens, rb.prompt_lens[rows]) and sub.logits is None
    with torch.no_grad():
        _close_on(response_logits(model, sub), response_logits(model, rb)[rows, :t],
                  sub.mask)


def test_micro_batches_match_the_whole_batch(model, rb):
    ref = _cfg(0, method="trm")                                        # full logits, KL to ref
    z_ref = torch.randn(rb.response.shape + (V,), generator=torch.Generator().manual_seed(1))
    micro = replace(ref, micro_batch=4)
    with torch.no_grad():
        whole, z_whole = forward_stats(model, rb, None, ref, 0, ref=z_ref)
        parts, z_parts = forward_stats(model, rb, None, micro, 0, ref=z_ref)
        again, _ = forward_stats(model, rb, None, micro, 0, ref=z_ref)
        _, z_whole_self = forward_stats(model, rb, None, ref, 0, self_ref=True)
        _, z_parts_self = forward_stats(model, rb, None, micro, 0, self_ref=True)
    assert whole.keys() == parts.keys() and "kl" in parts
    for name, x in whole.items():
        assert parts[name].shape == x.shape, name
        _close_on(parts[name], x, rb.mask)
        assert torch.equal(again[name], parts[name]), name             # bitwise run to run
    assert z_whole is None and z_parts is None                         # logits only for self_ref
    assert z_parts_self.shape == z_whole_self.shape
    _close_on(z_parts_self, z_whole_self, rb.mask)


def test_micro_batch_gradients_match_the_whole_batch(model, rb):
    grads = []
    for micro in (0, 2):
        model.zero_grad(set_to_none=True)
        st, _ = forward_stats(model, rb, None, _cfg(micro), 0)
        (st["logp"] * rb.mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    for g_whole, g_parts in zip(*grads):
        torch.testing.assert_close(g_parts, g_whole, rtol=0,
                                   atol=TOL * max(1.0, float(g_whole.abs().max())))


@pytest.mark.parametrize("micro", [0, 2])
def test_backward_by_micro_batch_is_the_chain_rule(model, rb, micro):
    """A nonlinear loss of the log-probs: its gradient through one graph over every row equals
    d loss / d logp (taken on detached log-probs) pushed back one micro-batch at a time."""
    def loss_of(logp):
        return (logp.masked_fill(~rb.mask, 0.0) ** 2).sum() / rb.mask.sum()

    model.zero_grad(set_to_none=True)
    loss_of(forward_stats(model, rb, None, _cfg(0), 0)[0]["logp"]).backward()
    whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        leaf = forward_stats(model, rb, None, _cfg(0), 0)[0]["logp"]
    leaf.requires_grad_()
    loss_of(leaf).backward()
    backward_by_micro_batch(model, rb, None, _cfg(micro), 0, leaf.grad)
    parts = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    assert any(float(g.abs().max()) > 0 for g in whole)
    for g_whole, g_parts in zip(whole, parts):
        torch.testing.assert_close(g_parts, g_whole, rtol=0,
                                   atol=TOL * max(1.0, float(g_whole.abs().max())))


def test_self_ref_takes_this_forwards_logits(model, rb):
    """``self_ref`` (TRM's exact KL on ``exact``, V1): the KL to this very forward is 0."""
    with torch.no_grad():
        st, z = forward_stats(model, rb, None, _cfg(0, method="trm"), 0, self_ref=True)
    assert z is not None and float(st["kl"][rb.mask].abs().max()) <= 1e-6


def test_pad_t_and_slice_bt():
    x = torch.ones(2, 3, 4, requires_grad=True)
    y = pad_t(x, 5)
    assert y.shape == (2, 5, 4) and y[:, 3:].eq(0).all() and y.requires_grad
    assert pad_t(x, 3) is x
    sub = type("Sub", (), {"response": torch.zeros(2, 2)})()
    assert slice_bt(torch.arange(12).view(3, 4), torch.tensor([0, 2]), sub).tolist() == \
        [[0, 1], [8, 9]]
    assert slice_bt(None, torch.tensor([0]), sub) is None


def test_check_finite_names_what_and_step():
    check_finite(torch.tensor([0.0, -1.0]), "loss", 3)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(TrainingDiverged, match="non-finite logits at step 7"):
            check_finite(torch.tensor([0.0, bad]), "logits", 7)
    assert issubclass(TrainingDiverged, ValueError)


@pytest.mark.parametrize("method, estimator, wants", [
    ("trm", "exact", True), ("trm", "k2k3", False), ("ar+tis", "exact", False),
    ("tis+trm", "exact", True),
])
def test_wants_exact_kl(method, estimator, wants):
    assert wants_exact_kl(_cfg(0, method=method, trm_estimator=estimator)) is wants


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_all_finite_finds_every_nan_and_inf_and_survives_an_overflowing_sum(dtype):
    from tailtheory.engine.forward_stats import all_finite

    x = torch.randn(3, 5, 7).to(dtype)
    assert all_finite(x)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[2, 4, 6] = bad
        assert not all_finite(y)
    big = torch.full((8,), torch.finfo(dtype).max, dtype=dtype)     # the sum overflows
    assert all_finite(big) and not all_finite(torch.cat([big, torch.tensor([float("nan")],
                                                                           dtype=dtype)]))
    assert all_finite(torch.ones(4, dtype=torch.long))
