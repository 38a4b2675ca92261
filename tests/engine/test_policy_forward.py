"""The trainer's own forward (tailtheory.engine.policy_forward): differentiable log-probs, the
fused LM head only from a large vocabulary, and the same numbers on both heads."""

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.engine import policy_forward
from tailtheory.engine.policy_forward import (FUSED_MIN_VOCAB, response_logprobs,
                                              use_fused_head)
from tailtheory.engine.rollout.engine import RolloutConfig, RolloutEngine

V, EOS, PAD = 256, 1, 0
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]


@pytest.fixture(scope="module")
def model():
    return tiny_lm(vocab_size=V, hidden=64, layers=2, heads=4, kv_heads=2, seed=0)


@pytest.fixture(scope="module")
def rb(model):
    eng = RolloutEngine(model, RolloutConfig(path="kv", max_new_tokens=4))
    return eng.generate(PROMPTS, eos_id=EOS, pad_id=PAD, generator=torch.Generator().manual_seed(0))


def test_response_logprobs_is_differentiable(model, rb):
    with torch.enable_grad():
        (response_logprobs(model, rb)[rb.mask]).sum().backward()
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


def test_fused_head_only_from_a_large_vocabulary():
    assert not use_fused_head(tiny_lm(vocab_size=512, hidden=16, layers=1, heads=2, kv_heads=1))
    assert use_fused_head(tiny_lm(vocab_size=FUSED_MIN_VOCAB, hidden=8, layers=1, heads=2,
                                  kv_heads=1))


def test_fused_and_full_heads_give_the_same_logprobs(model, rb, monkeypatch):
    with torch.no_grad():
        full = response_logprobs(model, rb, temperature=0.7)
        monkeypatch.setattr(policy_forward, "FUSED_MIN_VOCAB", 0)
        fused = response_logprobs(model, rb, temperature=0.7)
    assert torch.allclose(fused[rb.mask], full[rb.mask], rtol=1e-5, atol=1e-5)


def test_response_logits_run_the_head_on_response_positions_only(model, rb, monkeypatch):
    """The LM head over the response positions (``logits_to_keep``) gives the full forward's
    logits there, to float32 rounding, and their gradient; a model without ``logits_to_keep``
    takes the full forward and the slice."""
    from tailtheory.core.forward import full_forward

    P, T = rb.prompt_len, rb.response.shape[1]
    assert policy_forward.takes_logits_to_keep(model)
    grads = []
    for keep in (True, False):
        monkeypatch.setattr(policy_forward, "takes_logits_to_keep", lambda m, keep=keep: keep)
        model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            z = policy_forward.response_logits(model, rb)
            (z.log_softmax(-1)[..., 3] * rb.mask).sum().backward()
        grads.append((z.detach(), [p.grad.clone() for p in model.parameters()]))
    model.zero_grad(set_to_none=True)
    (z_keep, g_keep), (z_all, g_all) = grads
    assert z_keep.shape == z_all.shape == (len(PROMPTS), T, V)
    with torch.no_grad():
        ref = full_forward(model, rb.input_ids, rb.attention_mask)[:, P - 1:P + T - 1]
    torch.testing.assert_close(z_keep, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(z_all, ref, rtol=0, atol=1e-5)
    for a, b in zip(g_keep, g_all):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
