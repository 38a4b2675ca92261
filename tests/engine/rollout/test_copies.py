"""Tests of tailtheory.engine.rollout.copies: the inference copies of M7 and V2 (bf16, fp16, fp8)."""

import pytest
import torch

from tailtheory.engine.rollout import copies as cp
from tailtheory.mismatch import real as rm
from tailtheory.core.models import tiny_lm

E4M3_MAX = 448.0
E4M3_REL = 2.0 ** -4
"""Half the spacing of e4m3's 3-bit mantissa: the relative rounding error of a normal value."""
E4M3_MIN_NORMAL = 2.0 ** -6
E4M3_SUB_HALF_STEP = 2.0 ** -10
"""Half the subnormal spacing 2^-9: the absolute rounding error (in units of the scale) there."""


@pytest.fixture(scope="module")
def model():
    return rm.m7_model(256, hidden=64, layers=2)


def _weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(16, 32, generator=g) * torch.logspace(-3, 1, 16)[:, None]  # rows of any size
    w[3] = 0.0                                                                  # an all-zero row
    return w


@pytest.mark.parametrize("scaling", cp.FP8_SCALINGS)
def test_fp8_round_trip_is_within_e4m3_rounding(scaling):
    """Each weight comes back as q * scale with q the nearest e4m3 value: relative error <= 2^-4
    in e4m3's normal range, absolute error <= 2^-10 scale below it; the absmax maps to 448."""
    w = _weights()
    q, scale = cp.fp8_quantize(w, scaling)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
    assert scale.shape == ((16, 1) if scaling == "channel" else ())
    back = cp.fp8_dequantize(q, scale, torch.float32)
    x = (w / scale).abs()
    err = (back - w).abs()
    normal = x >= E4M3_MIN_NORMAL
    assert (err[normal] <= E4M3_REL * w.abs()[normal] * (1 + 1e-6)).all()
    assert (err[~normal] <= E4M3_SUB_HALF_STEP * scale.expand_as(w)[~normal] * (1 + 1e-6)).all()
    assert float(q.float().abs().max()) == E4M3_MAX
    if scaling == "channel":
        nonzero = w.abs().amax(-1) > 0
        assert (q.float().abs().amax(-1)[nonzero] == E4M3_MAX).all()
        assert scale[3] == 1.0 and (q[3].float() == 0).all()


def test_fp8_per_channel_is_per_tensor_row_by_row():
    """Equivalence: the vectorised per-channel scales are the per-tensor scaling of each row."""
    w = _weights(1)
    q, scale = cp.fp8_quantize(w, "channel")
    for i, row in enumerate(w):
        q_i, s_i = cp.fp8_quantize(row[None], "tensor")
        assert torch.equal(q[i].float(), q_i[0].float()) and torch.equal(scale[i, 0], s_i)


def test_per_channel_scaling_is_more_accurate_on_rows_of_different_size():
    """Why per-channel is the default: rows far below the tensor's absmax keep their precision."""
    g = torch.Generator().manual_seed(2)
    w = torch.randn(16, 32, generator=g) * torch.logspace(-6, 1, 16)[:, None]  # 7 decades
    err = {s: float(((cp.fp8_dequantize(*cp.fp8_quantize(w, s), torch.float32) - w).abs()
                     / w.abs()).mean()) for s in cp.FP8_SCALINGS}
    assert err["channel"] < E4M3_REL and err["tensor"] > 10 * err["channel"], err


def test_fp8_weight_names_are_the_block_linears(model):
    names = cp.fp8_weight_names(model)
    proj = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert len(names) == len(proj) * model.config.num_hidden_layers
    assert all(n.endswith(".weight") and n.split(".")[-2] in proj for n in names)
    tied = tiny_lm(vocab_size=64, hidden=32, layers=1, tie_embeddings=True)
    assert not any("embed" in n or "lm_head" in n for n in cp.fp8_weight_names(tied))


@pytest.mark.parametrize("path", tuple(cp.COPY_DTYPES))
def test_inference_copy_rounds_as_documented(model, path):
    """bf16 / fp16: a cast of every weight; fp8: the e4m3 round trip of the block Linears, a
    bfloat16 cast of the rest. The trainer is left unchanged."""
    before = {k: v.clone() for k, v in model.state_dict().items()}
    infer = cp.inference_copy(model, path)
    fp8 = cp.fp8_weight_names(model) if path == "fp8" else set()
    src = dict(model.named_parameters())
    for name, p in infer.named_parameters():
        assert p.dtype == cp.COPY_DTYPES[path], name
        w = src[name]
        want = cp.fp8_dequantize(*cp.fp8_quantize(w)) if name in fp8 else w.to(p.dtype)
        assert torch.equal(p, want), name
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert not infer.training


@pytest.mark.parametrize("path", tuple(cp.COPY_DTYPES))
def test_sync_copy_follows_the_trainer(path):
    trainer = tiny_lm(vocab_size=64, hidden=32, layers=1, seed=1)
    infer = cp.inference_copy(trainer, path)
    with torch.no_grad():
        for p in trainer.parameters():
            p.mul_(1.5).add_(0.01)
    cp.sync_copy(infer, trainer, path)
    fresh = cp.inference_copy(trainer, path)
    for (name, p), q in zip(infer.named_parameters(), fresh.parameters()):
        assert torch.equal(p, q), name


def test_fp8_mismatch_is_larger_than_bf16_and_under_m3(model):
    """The fp8 path is a coarser engine than bf16 (4 mantissa bits against 8), and its
    mismatch still obeys M3 at its own eps (a theorem)."""
    ids = rm.random_input_ids(256, 4, 16, seed=1)
    s = {path: rm.mismatch_envelope(*rm.paired_logits(model, ids, path))[0]
         for path in ("bf16", "fp8")}
    assert s["fp8"]["mean_abs"] > 2 * s["bf16"]["mean_abs"], s
    assert s["fp8"]["frac_under_exact"] == 1.0


# --- bad input ----------------------------------------------------------------------------------

def test_no_float8_build_gives_a_clear_error(model, monkeypatch):
    monkeypatch.delattr(torch, "float8_e4m3fn")
    ids = rm.random_input_ids(256, 1, 4)
    with pytest.raises(ValueError, match=r"float8 dtypes \(torch.float8_e4m3fn"):
        rm.paired_logits(model, ids, "fp8")
    with pytest.raises(ValueError, match="torch.float8_e4m3fn"):
        cp.fp8_quantize(torch.ones(2, 2))
    rm.paired_logits(model, ids, "bf16")  # the other paths do not need float8


def test_bad_scaling_path_and_model_rejected(model):
    with pytest.raises(ValueError, match="fp8 scaling must be one of"):
        cp.fp8_quantize(torch.ones(2, 2), "block")
    with pytest.raises(ValueError, match="fp8 scaling must be one of"):
        cp.inference_copy(model, "fp8", scaling="row")
    with pytest.raises(ValueError, match="needs a 2-D weight"):
        cp.fp8_quantize(torch.ones(3), "channel")
    with pytest.raises(ValueError, match="to make an inference copy"):
        cp.inference_copy(model, "kv")
    with pytest.raises(ValueError, match="model must be the float32 trainer"):
        cp.inference_copy(cp.inference_copy(model, "bf16"), "fp16")
    with pytest.raises(ValueError, match="does not match the inference copy"):
        cp.sync_copy(cp.inference_copy(model, "bf16"), tiny_lm(vocab_size=64, hidden=32), "bf16")
