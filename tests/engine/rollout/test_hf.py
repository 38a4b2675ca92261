"""The ``hf`` rollout backend's decoding state (tailtheory.engine.rollout.hf): V2's ``kv`` path.

A tiny Qwen2-style LM (eager attention, as ``tiny_lm`` builds it) with left-padded prompts of
different lengths. Incremental logits agree with the full forward to ``1e-5 * max|z|`` (float32
rounding of another reduction order, as in ``test_inference.py``).
"""

from types import SimpleNamespace

import pytest
import torch

from tailtheory.core.forward import full_forward, left_pad
from tailtheory.core.models import tiny_lm
from tailtheory.engine.rollout import hf as hf_decode
from tailtheory.engine.rollout.hf import HFDecode, decode_mask
from tailtheory.engine.rollout.engine import RolloutConfig, RolloutEngine

V, EOS, PAD = 256, 1, 0
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
F32_TOL = 1e-5


@pytest.fixture(scope="module")
def model():
    m = tiny_lm(vocab_size=V, hidden=64, layers=2, heads=4, kv_heads=2, seed=0)
    with torch.no_grad():
        m.get_output_embeddings().weight.mul_(20.0)  # sharp logits: a real tail
    return m.eval()


def _close(z: torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(z, ref, rtol=0, atol=F32_TOL * float(ref.abs().max()))


def test_eager_decode_mask_is_additive_on_prompt_padding(model):
    """Eager attention: ``(B, 1, 1, P+T)``, 0 where a position is seen, the dtype's minimum on
    the prompt padding."""
    full = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    mask = decode_mask(model, full)
    assert mask.shape == (2, 1, 1, 4) and mask.dtype == torch.float32
    lowest = torch.finfo(torch.float32).min
    assert mask[:, 0, 0].tolist() == [[lowest, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_other_attention_keeps_the_2d_mask():
    sdpa = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa"))
    full = torch.tensor([[0, 1, 1]])
    assert decode_mask(sdpa, full) is full


def test_prefill_and_decode_logits_match_the_full_forward(model):
    """Every row at every step (``rows`` is None): the logits of position ``P - 1 + t`` of the
    full forward over prompt + fed tokens."""
    T = 4
    ids, attn, lens = left_pad(PROMPTS, PAD, V)
    g = torch.Generator().manual_seed(0)
    resp = torch.randint(2, V, (len(PROMPTS), T), generator=g)
    seq = torch.cat([ids, resp], 1)
    with torch.no_grad():
        ref = full_forward(model, seq, torch.cat([attn, torch.ones_like(resp, dtype=torch.bool)],
                                                 1))                    # (B, P+T, V)
        run = HFDecode(model, ids, attn, lens, T)
        P = ids.shape[1]
        assert run.rows is None
        for t in range(T):
            assert run.logits.shape == (len(PROMPTS), V)
            _close(run.logits, ref[:, P - 1 + t])
            if t + 1 < T:
                run.advance(resp[:, t], torch.ones(len(PROMPTS), dtype=torch.bool))


@pytest.mark.parametrize("path", ["bf16", "fp16", "kv", "fp8"])
def test_prebuilt_decode_mask_is_bitwise_the_2d_mask(model, path, monkeypatch):
    """The additive 4-D decode mask built once per rollout gives the samples, log-probs and logits
    of the 2-D padding mask the model expands itself at every step (padded prompts)."""
    def gen():
        eng = RolloutEngine(model, RolloutConfig(path=path, max_new_tokens=8, return_logits=True))
        return eng.generate(PROMPTS, eos_id=EOS, pad_id=PAD,
                            generator=torch.Generator().manual_seed(7))

    fast = gen()
    monkeypatch.setattr(hf_decode, "decode_mask", lambda model, full: full)
    slow = gen()
    for name in ("response", "mask", "logp", "logits"):
        assert torch.equal(getattr(fast, name), getattr(slow, name)), name
    assert (fast.response.shape[1] == 8) and not fast.attention_mask.all()  # padding present
