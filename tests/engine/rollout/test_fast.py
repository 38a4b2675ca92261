"""Inference engine (tailtheory.engine.rollout.fast) and the rollout backend ``fast``.

Models: tiny Qwen2 (q/k/v biases, untied head) and Llama (tied head) from ``tiny_lm``, and a
Llama built from ``LlamaConfig`` with one KV head, ``head_dim`` != hidden / heads, o_proj and
MLP biases and rope_theta 500; biases and norm weights perturbed so that a misplaced one shows.

Tolerances: float32 logits agree with the Hugging Face full forward, and a shared-prompt prefill
(or a compacted step) with one over every row, to ``1e-5 * max|z|`` (float32 rounding of another
reduction order: the differences seen are ~3e-7 of the scale; bitwise only on one CPU's kernels);
bf16 / fp16 / fp8 logits agree with the forward of ``inference_copy(model, path)`` to
``4 * eps(dtype) * max|z|``.
"""

import pytest
import torch

from tailtheory.core.forward import full_forward, left_pad
from tailtheory.core.models import tiny_lm
from tailtheory.core.stats import token_stats
from tailtheory.engine.rollout import fast as inference
from tailtheory.engine.rollout.fast import InferenceEngine, supports, unsupported
from tailtheory.engine.rollout.noise import RolloutNoise, noisy_weights_of
from tailtheory.engine.policy_forward import response_logprobs
from tailtheory.engine.rollout.engine import FAST_DTYPES, PATHS, RolloutConfig, RolloutEngine
from tailtheory.engine.rollout.copies import COPY_DTYPES, inference_copy

pytestmark = pytest.mark.usefixtures("one_thread")

V, EOS, PAD = 256, 1, 0
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [15]]
GROUPED = [[5, 6, 7]] * 3 + [[8, 9, 10, 11]] * 3 + [[12]] * 2   # GRPO-style groups
F32_TOL = 1e-5


def _perturb(model, seed: int):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


def _llama_config_model():
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=V, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                      attention_bias=True, mlp_bias=True, rope_theta=500.0,
                      max_position_embeddings=128, attn_implementation="eager",
                      bos_token_id=None, eos_token_id=None)
    torch.manual_seed(2)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


MODELS = {
    "qwen2": lambda: tiny_lm(vocab_size=V, hidden=64, layers=2, heads=4, kv_heads=2, seed=0),
    "llama_tied": lambda: tiny_lm(vocab_size=V, hidden=64, layers=2, heads=4, kv_heads=2,
                                  arch="llama", tie_embeddings=True, seed=1),
    "llama_bias": _llama_config_model,
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    return _perturb(MODELS[request.param](), 0)


@pytest.fixture(scope="module")
def qwen():
    m = _perturb(MODELS["qwen2"](), 1)
    with torch.no_grad():
        m.get_output_embeddings().weight.mul_(20.0)  # sharp logits, as test_rollout's model
    return m


def _ref(model, ids, attn):
    with torch.no_grad():
        return full_forward(model, ids, attn)


def _tol(ref: torch.Tensor, dtype) -> float:
    scale = float(ref.abs().max())
    return (F32_TOL if dtype == "float32" else 4 * torch.finfo(COPY_DTYPES[dtype]).eps) * scale


def _close(z, ref, dtype="float32"):
    torch.testing.assert_close(z.float(), ref.float(), rtol=0, atol=_tol(ref, dtype))


def _sequences(prompts, T=5, seed=0):
    """Left-padded prompts plus T random response tokens: ids (B, P+T), mask, P."""
    ids, attn, _ = left_pad(prompts, PAD, V)
    g = torch.Generator().manual_seed(seed)
    resp = torch.randint(2, V, (len(prompts), T), generator=g)
    full = torch.cat([ids, resp], 1)
    return ids, attn, full, torch.cat([attn, torch.ones_like(resp, dtype=torch.bool)], 1)


def test_supports_the_models(model):
    assert supports(model) and unsupported(model) is None


def test_prefill_logits_match_hf_full_forward(model):
    ids, attn, _ = left_pad(PROMPTS, PAD, V)
    ref = _ref(model, ids, attn)
    z = InferenceEngine(model).full_logits(ids, attn)
    _close(z[attn], ref[attn])


@pytest.mark.parametrize("compact", [0.0, 1.0])
@pytest.mark.parametrize("prompts", [PROMPTS, GROUPED], ids=["distinct", "grouped"])
def test_decode_logits_match_hf_full_forward(model, prompts, compact, monkeypatch):
    """Incremental decoding with left padding, different prompt lengths, shared prompts, and
    rows finishing on the way (compacted away at once, or kept and masked)."""
    monkeypatch.setattr(inference, "COMPACT", compact)
    T = 5
    ids, attn, full, fattn = _sequences(prompts, T)
    ref = _ref(model, full, fattn)                                  # (B, P+T, V)
    P, B = ids.shape[1], len(prompts)
    run = InferenceEngine(model).start(ids, attn, T)
    alive = torch.ones(B, dtype=torch.bool)
    for t in range(T):
        assert alive[run.rows].all() or compact > 0
        _close(run.logits, ref[run.rows, P - 1 + t])
        if t + 1 < T:
            if alive.sum() > 1:
                alive[t % B] = False                                 # one row finishes a step
            run.advance(full[:, P + t], alive)
    assert len(run.rows) == (B - min(T - 1, B - 1) if compact == 0.0 else B)


@pytest.mark.parametrize("path", ["bf16", "fp16", "fp8"])
def test_low_precision_logits_match_the_inference_copy(model, path):
    ids, attn, full, fattn = _sequences(PROMPTS, 4)
    copy = inference_copy(model, path)
    ref = _ref(copy, full, fattn)
    eng = InferenceEngine(model, path)
    _close(eng.full_logits(full, fattn)[fattn], ref[fattn], path)
    P, run = ids.shape[1], eng.start(ids, attn, 4)
    for t in range(4):
        _close(run.logits, ref[:, P - 1 + t], path)
        if t < 3:
            run.advance(full[:, P + t], torch.ones(len(PROMPTS), dtype=torch.bool))
    assert (ref.float() - _ref(model, full, fattn))[fattn].abs().max() > 0  # the dtype rounds


def test_shared_prompts_prefill_equals_unshared(qwen):
    """Groups of identical prompts prefilled once give the logits of every row prefilled on its
    own (the same prompts interleaved, so that no two neighbours match), to float32 rounding.

    Not bitwise: the shared prefill runs the forward on the 3 distinct prompts, the unshared one
    on all 8 rows, and the decode steps run the 8 rows in another order; the GEMM kernels'
    blocking (and, through it, the reduction order) depends on those shapes on some CPUs (an AMD
    EPYC differs in the last bits). A wrong cache row (another prompt's keys) moves the
    logits by O(max|z|), far above ``_close``'s ``F32_TOL * max|z|``."""
    order = [0, 3, 6, 1, 4, 7, 2, 5]                                # no equal neighbours
    mixed = [GROUPED[i] for i in order]
    ids, attn, full, _ = _sequences(GROUPED, 3)
    mids, mattn, _, _ = _sequences(mixed, 3)
    eng = InferenceEngine(qwen)
    a = eng.start(ids, attn, 3)
    za = [a.logits.clone()]
    back = torch.tensor(order).argsort()
    b = InferenceEngine(qwen).start(mids, mattn, 3)
    zb = [b.logits[back].clone()]
    alive = torch.ones(len(GROUPED), dtype=torch.bool)
    for t in range(2):
        a.advance(full[:, ids.shape[1] + t], alive)
        b.advance(full[order, ids.shape[1] + t], alive)
        za.append(a.logits.clone())
        zb.append(b.logits[back].clone())
    for x, y in zip(za, zb):
        _close(x, y)


def _gen(model, seed=0, prompts=GROUPED, eos=EOS, **cfg):
    eng = RolloutEngine(model, RolloutConfig(**{"max_new_tokens": 8, "backend": "fast", **cfg}))
    return eng.generate(prompts, eos_id=eos, pad_id=PAD,
                        generator=torch.Generator().manual_seed(seed))


def _eos_token(model):
    """A token that some rows sample early: rows then finish at different lengths."""
    return int(_gen(model, 0, path="kv").response[0, 1])


@pytest.mark.parametrize("path", PATHS)
def test_generate_fast_gives_a_valid_batch(qwen, path):
    eos = _eos_token(qwen)
    cfg = dict(path=path, temperature=0.8, prune_rule="min_p", rho=1e-2, return_logits=True,
               noise=0.1 if path in ("logit_noise", "weight_noise") else 0.0)
    rb = _gen(qwen, 1, eos=eos, **cfg)
    B, T = rb.response.shape
    assert rb.input_ids.shape == (B, rb.prompt_len + T) and rb.logits.shape == (B, T, V)
    assert rb.keep.shape == (B, T, V) and rb.prompt_lens.tolist() == [len(p) for p in GROUPED]
    ended = rb.mask.sum(1) < T
    assert ended.any() and (~ended).any() or T < 8                   # different lengths
    for row, m, tokens in zip(rb.response, rb.mask, rb.response):
        n = int(m.sum())
        assert m[:n].all() and not m[n:].any()                      # up to and including EOS
        assert (row[:n - 1] != eos).all() and (n == T or row[n - 1] == eos)
        assert (tokens[n:] == PAD).all()
    assert (rb.logp[~rb.mask] == 0).all() and (rb.logp[rb.mask] <= 0).all()
    assert rb.keep.gather(-1, rb.response.unsqueeze(-1)).squeeze(-1)[rb.mask].all()
    ref = token_stats(rb.logits, rb.response, keep=rb.keep, temperature=0.8)["logp"]
    if path == "exact":                                             # V1: the trainer's logp
        assert torch.equal(rb.logp[rb.mask], response_logprobs(
            qwen, rb, temperature=0.8, keep=rb.keep)[rb.mask])
    else:                                    # log softmax_S(z / tau) of the sampled logits
        # bitwise: the same elementwise ops and a log_softmax over V row by row, on the same
        # row values (a row's result never depends on the other rows or their number)
        assert torch.equal(rb.logp[rb.mask], ref[rb.mask])
        dtype = FAST_DTYPES[path]      # weight_noise: the noisy weights of step 0
        weights = noisy_weights_of(RolloutNoise.of(RolloutConfig(**cfg)), qwen)
        z = InferenceEngine(qwen, dtype, weights=weights).full_logits(
            rb.input_ids, rb.attention_mask)[:, rb.prompt_len - 1:-1]
        z = z if rb.noise is None else z + rb.noise                 # logit_noise: z + delta
        _close(rb.logits[rb.mask], z[rb.mask], dtype)
        assert (rb.logits[~rb.mask] == 0).all()                     # finished rows: zeros


@pytest.mark.parametrize("path", ["kv", "bf16", "exact"])
def test_generate_fast_same_seed_same_batch(qwen, path):
    eos = _eos_token(qwen)
    a, b = _gen(qwen, 3, eos=eos, path=path), _gen(qwen, 3, eos=eos, path=path)
    for f in ("input_ids", "response", "mask", "logp", "attention_mask"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    assert not torch.equal(a.response, _gen(qwen, 4, eos=eos, path=path).response)


@pytest.mark.parametrize("cfg", [dict(), dict(temperature=0.7, prune_rule="min_p", rho=1e-3)])
def test_exact_fast_is_bitwise_the_trainer_V1(qwen, cfg):
    rb = _gen(qwen, 2, path="exact", eos=_eos_token(qwen), **cfg)
    lp = response_logprobs(qwen, rb, temperature=cfg.get("temperature", 1.0), keep=rb.keep)
    assert torch.equal(rb.logp[rb.mask], lp[rb.mask]) and (rb.logp[~rb.mask] == 0).all()


def test_fast_kv_is_close_to_hf_kv(qwen):
    """Same weights, same dtype: the fast backend's rollout logp is the trainer's up to float32
    rounding, like the hf backend's ``kv`` path."""
    rb = _gen(qwen, 5, path="kv")
    d = (rb.logp - response_logprobs(qwen, rb))[rb.mask].abs()
    assert d.max() < 1e-4


def test_sync_follows_the_trainer():
    trainer = tiny_lm(vocab_size=V, hidden=64, layers=2, seed=3)
    eng = RolloutEngine(trainer, RolloutConfig(path="bf16", backend="fast", max_new_tokens=4))
    ids, attn, _ = left_pad(PROMPTS, PAD, V)
    before = eng.fast.full_logits(ids, attn)
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(0.05)
    assert torch.equal(eng.fast.full_logits(ids, attn), before)    # a copy, until synced
    eng.sync(trainer)
    after = eng.fast.full_logits(ids, attn)
    assert not torch.equal(after, before)
    assert torch.equal(after, InferenceEngine(trainer, "bf16").full_logits(ids, attn))


def test_unsupported_model_on_fast_is_an_error_naming_hf():
    from transformers import AutoModelForCausalLM, GPT2Config

    cfg = GPT2Config(vocab_size=V, n_embd=32, n_layer=1, n_head=2, n_positions=64,
                     bos_token_id=0, eos_token_id=EOS, attn_implementation="eager")
    torch.manual_seed(0)
    gpt2 = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    assert not supports(gpt2) and "gpt2" in unsupported(gpt2)
    with pytest.raises(ValueError, match="cannot run"):
        InferenceEngine(gpt2)
    with pytest.raises(ValueError, match="cannot run this model, a 'gpt2' model .*"
                                         "--rollout-backend hf .*backend='hf'"):
        RolloutEngine(gpt2, RolloutConfig(path="bf16", backend="fast", max_new_tokens=4))
    eng = RolloutEngine(gpt2, RolloutConfig(path="bf16", backend="hf", max_new_tokens=4))
    rb = eng.generate(PROMPTS, eos_id=EOS, pad_id=PAD, generator=torch.Generator().manual_seed(0))
    assert rb.response.shape[0] == len(PROMPTS) and torch.isfinite(rb.logp).all()


def test_unsupported_rope_scaling():
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1,
                      rope_scaling={"rope_type": "linear", "factor": 2.0},
                      bos_token_id=None, eos_token_id=None)
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    assert "linear" in unsupported(m)


def test_bad_backend_and_dtype_are_clear_errors(qwen):
    with pytest.raises(ValueError, match=r"backend must be one of \('hf', 'fast'\)"):
        RolloutConfig(backend="vllm")
    with pytest.raises(ValueError, match="dtype must be one of"):
        InferenceEngine(qwen, "int8")
    ids, attn, _ = left_pad(PROMPTS, PAD, V)
    run = InferenceEngine(qwen).start(ids, attn, 1)                # room for one new token
    tok, alive = torch.full((len(PROMPTS),), 5), torch.ones(len(PROMPTS), dtype=torch.bool)
    run.advance(tok, alive)
    with pytest.raises(ValueError, match="holds 1 new tokens"):
        run.advance(tok, alive)
