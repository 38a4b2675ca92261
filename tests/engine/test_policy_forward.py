"""The trainer's own forward (tailtheory.engine.policy_forward): differentiable log-probs, the
fused LM head only from a large vocabulary, and the same numbers on both heads."""

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.engine import policy_forward
from tailtheory.engine.policy_forward import (FUSED_MIN_VOCAB, response_logprobs,
                                              use_fused_head)
from tailtheory.engine.rollout import RolloutConfig, RolloutEngine

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
