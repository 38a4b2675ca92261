"""Model families of the ``fast`` inference engine (tailtheory.engine.rollout.families).

Models, built from ``transformers`` configs with seeded random weights at unit scale (matrices
``N(0, 1 / fan_in)``, embeddings ``N(0, 1)``, norm weights uniform in [0.5, 1.5], biases
``N(0, 0.1^2)``: attention far from uniform, so that the rotary embedding and the q/k norms show
in the logits), V = 300, hidden 64, 2 layers, 4 heads, 2 KV heads:

- Qwen3, ``head_dim`` 32 != 64 / 4: tied head without biases, untied head with
  ``attention_bias`` (q/k/v/o biases).
- Llama 3.x, ``head_dim`` 32: ``llama3`` rope scaling, theta 5e5, factor 8, low / high frequency
  factors 1 / 4, ``original_max_position_embeddings`` 32: wavelengths 6.3 (kept, below 32 / 4),
  14.3 (interpolated), 32.4 and up (divided by 8, above 32 / 1); the sequences run to
  position 45, past that low-frequency wavelength 32.

Tolerances, as ``test_fast``'s: float32 engine against the model's forward ``1e-5 * max|z|``;
a 16-bit engine against the forward of ``inference_copy(model, path)`` ``4 * eps(dtype) * max|z|``.
"""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

from tailtheory.core.forward import full_forward, left_pad
from tailtheory.core.models import skeleton_lm, tiny_lm
from tailtheory.engine.rollout import fast
from tailtheory.engine.rollout.copies import COPY_DTYPES, fp8_weight_names, inference_copy
from tailtheory.engine.rollout.engine import RolloutConfig, RolloutEngine
from tailtheory.engine.rollout.families import (ARCHS, REFUSED, ROPE_TYPES, rope_frequencies,
                                                supports, unsupported)
from tailtheory.engine.rollout.fast import DTYPES, InferenceEngine

pytestmark = pytest.mark.usefixtures("one_thread")

V, PAD = 300, 0
SIZE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=128, attn_implementation="eager", bos_token_id=None,
            eos_token_id=None, pad_token_id=None)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
LENGTHS, T = (40, 33, 36), 6          # prompts of 33-40 tokens, then 6 more: positions 0-45


def _randomise(model, seed: int):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return model.eval()


def _build(config, seed: int):
    torch.manual_seed(seed)
    return _randomise(AutoModelForCausalLM.from_config(config, dtype=torch.float32), seed)


MODELS = {
    "qwen3_tied": lambda: _build(Qwen3Config(**SIZE, tie_word_embeddings=True), 0),
    "qwen3_bias": lambda: _build(Qwen3Config(**SIZE, attention_bias=True), 1),
    "llama3": lambda: _build(LlamaConfig(**SIZE, rope_theta=5e5, rope_scaling=LLAMA3), 2),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    return MODELS[request.param]()


@pytest.fixture(scope="module")
def qwen3():
    return MODELS["qwen3_bias"]()


def _sequences():
    """Left-padded random prompts of :data:`LENGTHS` and T random tokens after each."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in LENGTHS]
    ids, attn, _ = left_pad(prompts, PAD, V)
    resp = torch.randint(1, V, (len(prompts), T), generator=g)
    return ids, attn, torch.cat([ids, resp], 1), torch.cat([attn, torch.ones_like(resp)], 1)


def _ref(model, ids, attn):
    with torch.no_grad():
        return full_forward(model, ids, attn)


def _tol(ref, path="float32") -> float:
    eps = 1e-5 if path == "float32" else 4 * torch.finfo(COPY_DTYPES[path]).eps
    return eps * float(ref.abs().max())


def _max_err(eng, ref):
    """Largest |engine - ref| over the full forward and a KV-cache decode of :func:`_sequences`."""
    ids, attn, full, fattn = _sequences()
    err = (eng.full_logits(full, fattn).float() - ref.float())[fattn.bool()].abs().max()
    P, run = ids.shape[1], eng.start(ids, attn, T)
    alive = torch.ones(len(LENGTHS), dtype=torch.bool)
    for t in range(T):
        err = max(err, (run.logits.float() - ref[:, P - 1 + t].float()).abs().max())
        if t + 1 < T:
            run.advance(full[:, P + t], alive)
    return float(err)


def test_the_families_and_rope_types():
    assert ARCHS == ("qwen2", "llama", "qwen3") and ROPE_TYPES == ("default", "llama3")
    assert fast.ARCHS is ARCHS and fast.unsupported is unsupported and fast.supports is supports


def test_rope_frequencies_are_the_models_buffers(model):
    """float32: the model's own ``inv_freq``, bitwise; a 16-bit engine's: the buffer of the
    bfloat16 inference copy (``.to(bfloat16)`` casts it), bitwise."""
    rotary = model.get_decoder().rotary_emb
    inv_freq, scaling = rope_frequencies(model.config)
    assert torch.equal(inv_freq, rotary.inv_freq) and scaling == rotary.attention_scaling == 1.0
    copy = inference_copy(model, "bf16").get_decoder().rotary_emb.inv_freq
    assert copy.dtype == torch.bfloat16
    assert torch.equal(InferenceEngine(model, "bf16").inv_freq, copy.float())


def test_llama3_frequencies_span_the_three_bands():
    ratio = rope_frequencies(MODELS["llama3"]().config)[0] / rope_frequencies(
        LlamaConfig(**SIZE, rope_theta=5e5))[0]
    assert ratio[0] == 1 and 1 / 8 < ratio[1] < 1 and torch.allclose(ratio[2:], torch.tensor(1 / 8))


def test_float32_logits_match_the_model(model):
    """Full forward and KV-cache decode at positions 0-45 (past the llama3 threshold 32)."""
    assert supports(model)
    ids, attn, full, fattn = _sequences()
    ref = _ref(model, full, fattn)
    assert _max_err(InferenceEngine(model, "float32"), ref) <= _tol(ref[fattn.bool()])


@pytest.mark.parametrize("path", ["bf16", "fp16", "fp8"])
def test_16_bit_logits_match_the_inference_copy(model, path):
    ids, attn, full, fattn = _sequences()
    ref = _ref(inference_copy(model, path), full, fattn)
    assert _max_err(InferenceEngine(model, path), ref) <= _tol(ref[fattn.bool()], path)


def test_the_tests_see_the_rope_and_the_qk_norm(model):
    """The checks above would catch a wrong rope or a missing q/k norm: each moves the logits by
    far more than the float32 tolerance."""
    ids, attn, full, fattn = _sequences()
    ref = _ref(model, full, fattn)
    eng = InferenceEngine(model, "float32")
    if model.config.model_type == "llama":                         # unscaled frequencies
        eng.inv_freq = rope_frequencies(LlamaConfig(**SIZE, rope_theta=5e5))[0]
    else:                                                          # q/k norm weights 1
        eng.layers = [(*rest, torch.ones_like(qkn)) for *rest, qkn in eng.layers]
    assert _max_err(eng, ref) > 100 * _tol(ref[fattn.bool()])


def test_qk_norms_are_not_fp8_weights(qwen3):
    names = fp8_weight_names(qwen3)
    assert "model.layers.0.self_attn.q_proj.weight" in names and "lm_head.weight" not in names
    assert not any("norm" in n for n in names)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_every_engine_dtype_runs_qwen3(qwen3, dtype):
    """Finite logits of the right shape; each dtype's own bound is checked above."""
    ids, attn, full, fattn = _sequences()
    z = InferenceEngine(qwen3, dtype).full_logits(full, fattn)
    assert z.shape == (*full.shape, V) and torch.isfinite(z).all()


@pytest.mark.parametrize("path", ["kv", "bf16", "fp16", "fp8"])
def test_rollouts_on_qwen3(qwen3, path):
    eng = RolloutEngine(qwen3, RolloutConfig(path=path, backend="fast", max_new_tokens=4))
    rb = eng.generate([[5, 6, 7], [8, 9]], eos_id=1, pad_id=PAD,
                      generator=torch.Generator().manual_seed(0))
    assert rb.response.shape[0] == 2 and torch.isfinite(rb.logp).all()


def test_tiny_lm_builds_qwen3():
    m = tiny_lm(vocab_size=64, hidden=32, layers=1, heads=2, kv_heads=1, arch="qwen3")
    assert m.config.model_type == "qwen3" and m.config.head_dim == 16 and supports(m)
    assert m.model.layers[0].self_attn.q_norm.weight.shape == (16,)


def _meta(arch="llama", **fields):
    size = {**SIZE, "num_hidden_layers": 1}
    return skeleton_lm((Qwen3Config if arch == "qwen3" else LlamaConfig)(**size, **fields))


REFUSALS = [
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "linear"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "dynamic"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                        "original_max_position_embeddings": 32}), "yarn"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(pretraining_tp=2), "pretraining_tp"),
    *[(dict([(name, 0.5)]), name) for name, (neutral, _) in REFUSED.items() if 0.5 not in neutral],
]


@pytest.mark.parametrize("fields, name", REFUSALS, ids=[n for _, n in REFUSALS])
def test_refused_fields_are_named(fields, name):
    why = unsupported(_meta(**fields))
    assert why is not None and name in why and "\n" not in why


@pytest.mark.parametrize("fields, name", [
    (dict(use_sliding_window=True, max_window_layers=0), "use_sliding_window"),
    (dict(layer_types=["sliding_attention"]), "sliding_attention")])
def test_sliding_windows_are_refused(fields, name):
    assert name in unsupported(_meta("qwen3", **fields))


def test_neutral_fields_and_biases_run():
    for arch, fields in [("llama", dict(mlp_bias=True, attention_bias=True, logits_scaling=1.0,
                                        embedding_multiplier=1, use_qk_norm=False)),
                         ("qwen3", dict(attention_bias=True, sliding_window=4096))]:
        assert unsupported(_meta(arch, **fields)) is None


def test_other_norms_are_refused_by_class():
    """A ``(1 + w)`` norm (Gemma's) in place of the family's RMSNorm, or a q_norm in a family
    that runs none."""
    m = _meta("qwen3")
    with torch.device("meta"):
        m.model.layers[0].self_attn.k_norm = GemmaRMSNorm(32)
    assert "layers.0.self_attn.k_norm is GemmaRMSNorm" in unsupported(m)
    m = _meta("llama")
    with torch.device("meta"):
        m.model.layers[0].self_attn.q_norm = GemmaRMSNorm(32)
    assert "q_norm" in unsupported(m)
