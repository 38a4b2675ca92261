"""Rollout engine (tailtheory.engine.rollout.engine) on the ``hf`` decoder, the one V1 and V2 measure:
V1 bitwise zero mismatch, V2 real mismatch.

A tiny Qwen2-style LM (vocabulary 256, so unused tokens form a tail) with a sharpened output layer
(logits spread as in a trained model).
"""

import pytest
import torch

from tailtheory.core.forward import left_pad
from tailtheory.engine.policy_forward import response_logits, response_logprobs
from tailtheory.engine.rollout.engine import (PATHS, RolloutConfig, RolloutEngine, sample_inverse_cdf,
                                      sampled_logprobs)
from tailtheory.engine.rollout.copies import fp8_dequantize, fp8_quantize, fp8_weight_names
from tailtheory.core.stats import token_stats
from tailtheory.core.models import tiny_lm
from tailtheory.core.safeset import safe_vocab_mask

V, EOS, PAD = 256, 1, 0
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]


@pytest.fixture(scope="module")
def model():
    m = tiny_lm(vocab_size=V, hidden=64, layers=2, heads=4, kv_heads=2, seed=0)
    with torch.no_grad():
        m.get_output_embeddings().weight.mul_(20.0)  # sharp logits: a real tail
    return m


def _gen(model, seed=0, prompts=PROMPTS, eos=EOS, **cfg):
    eng = RolloutEngine(model, RolloutConfig(**{"max_new_tokens": 6, "backend": "hf", **cfg}))
    gen = torch.Generator().manual_seed(seed)
    return eng.generate(prompts, eos_id=eos, pad_id=PAD, generator=gen)


@pytest.mark.parametrize("cfg", [dict(), dict(temperature=0.7), dict(prune_rule="min_p", rho=1e-3)])
def test_exact_path_is_bitwise_the_trainer_V1(model, cfg):
    """V1: exact-path rollout log-probs are torch.equal to the trainer's over batches and seeds."""
    tau = cfg.get("temperature", 1.0)
    for seed in range(2):
        for prompts in (PROMPTS, [[20, 21, 22, 23, 24]] * 3):
            rb = _gen(model, seed, prompts, path="exact", **cfg)
            with torch.enable_grad():  # the trainer's call, with autograd on
                lp = response_logprobs(model, rb, temperature=tau, keep=rb.keep)
            assert lp.requires_grad
            assert torch.equal(rb.logp[rb.mask], lp.detach()[rb.mask])


@pytest.mark.parametrize("path, max_abs", [("bf16", 0.5), ("fp16", 0.1), ("kv", 1e-4),
                                           ("fp8", 2.0)])
def test_mismatch_paths_are_nonzero_but_small_V2(model, path, max_abs):
    """V2: the low-precision copies and KV decoding disagree with the trainer, but only a little."""
    deltas = []
    for seed in range(2):
        rb = _gen(model, seed, path=path)
        deltas.append((rb.logp - response_logprobs(model, rb))[rb.mask])
    d = torch.cat(deltas).abs()
    assert d.max() > 0, f"{path}: no mismatch at all"
    assert d.max() < max_abs and d.mean() < max_abs / 5, (path, d.max(), d.mean())


@pytest.mark.parametrize("path", PATHS)
def test_same_seed_same_samples(model, path):
    a, b = _gen(model, 3, path=path), _gen(model, 3, path=path)
    assert torch.equal(a.response, b.response) and torch.equal(a.logp, b.logp)
    c = _gen(model, 4, path=path)
    assert not torch.equal(a.response, c.response)


@pytest.mark.parametrize("path", PATHS)
def test_three_token_smoke(model, path):
    rb = _gen(model, 0, path=path, max_new_tokens=3, return_logits=True)
    B = len(PROMPTS)
    assert rb.response.shape == (B, 3) and rb.mask.shape == (B, 3) and rb.logp.shape == (B, 3)
    assert rb.input_ids.shape == (B, rb.prompt_len + 3) and rb.logits.shape == (B, 3, V)
    assert torch.isfinite(rb.logp).all() and (rb.logp <= 0).all()
    assert rb.prompt_lens.tolist() == [len(p) for p in PROMPTS]


@pytest.mark.parametrize("path", ["bf16", "fp16", "kv", "fp8"])
def test_rollout_logp_is_of_the_sampled_distribution(model, path):
    """The returned logp is log softmax_S(z / tau) of the rollout logits at the sampled token."""
    rb = _gen(model, 1, path=path, temperature=0.8, prune_rule="min_p", rho=1e-2,
              return_logits=True)
    ref = token_stats(rb.logits, rb.response, keep=rb.keep, temperature=0.8)["logp"]
    # bitwise: the sampler's ops on the same row values, row by row (see test_inference.py)
    assert torch.equal(rb.logp[rb.mask], ref[rb.mask])


def test_eos_masks_up_to_and_including_eos(model):
    first = _gen(model, 5, eos=EOS, path="kv")
    eos = int(first.response[0, 2])  # a token row 0 samples at step 2: make it the EOS
    rb = _gen(model, 5, eos=eos, path="kv")
    for row, mask, tokens in zip(first.response, rb.mask, rb.response):
        hits = (row == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else row.shape[0]
        assert mask[:end].all() and not mask[end:].any()
        assert torch.equal(tokens[:end], row[:end]) and (tokens[end:] == PAD).all()
    assert (rb.logp[~rb.mask] == 0).all() and rb.mask[0, 2] and not rb.mask[0, 3:].any()
    one = _gen(model, 6, prompts=PROMPTS[:1], eos=EOS, path="kv")
    alone = _gen(model, 6, prompts=PROMPTS[:1], eos=int(one.response[0, 2]), path="kv")
    assert alone.response.shape[1] == 3  # generation stops once every row has finished
    assert torch.equal(alone.response[0], one.response[0, :3])


def test_pruning_keeps_samples_inside_S(model):
    """DVP on the sampler side: every sampled token lies in S, S recomputed from the logits."""
    tau = 1.3
    rb = _gen(model, 2, path="bf16", prune_rule="min_p", rho=0.05, temperature=tau,
              return_logits=True)
    assert rb.keep.gather(-1, rb.response.unsqueeze(-1)).squeeze(-1)[rb.mask].all()
    again = safe_vocab_mask(rb.logits / tau, rule="min_p", threshold=0.05)
    assert torch.equal(again[rb.mask], rb.keep[rb.mask])
    assert rb.keep[rb.mask].sum(-1).float().mean() < V / 2  # the pruning is not vacuous


def test_inverse_cdf_samples_the_distribution():
    """Frequencies over 200,000 draws match p within 5 binomial standard errors per token (a
    skewed p over 16 ids, with zeros that are never drawn); rows need not sum to 1."""
    g = torch.Generator().manual_seed(0)
    p = torch.rand(16, generator=g) ** 4
    p[[0, 7, 15]] = 0.0                                       # first, middle, last
    n = 200_000
    tok = sample_inverse_cdf((3.0 * p).expand(n, 16), torch.Generator().manual_seed(1))
    assert tok.shape == (n, 1) and tok.dtype == torch.int64
    freq = torch.bincount(tok[:, 0], minlength=16).double() / n
    q = (p / p.sum()).double()
    assert (freq[q == 0] == 0).all()
    assert ((freq - q).abs() <= 5 * (q * (1 - q) / n).sqrt() + 1e-12).all()


def test_inverse_cdf_at_the_top_of_the_draw_takes_the_last_possible_token(monkeypatch):
    """``u`` times the total rounded up to the total: the last token of non-zero probability,
    never a zero one past it."""
    p = torch.tensor([[0.25, 0.75, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0]])
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.ones(2, 1, dtype=torch.float64))
    assert sample_inverse_cdf(p).tolist() == [[1], [2]]


@pytest.mark.parametrize("path", ["kv", "bf16"])
def test_inverse_cdf_rollouts_sample_inside_the_kept_set(model, path, monkeypatch):
    """The ``inverse-cdf`` sampler in a rollout: ``torch.multinomial`` is never called, and
    pruned-away tokens are never sampled."""
    def refuse(*args, **kwargs):
        raise AssertionError("torch.multinomial called by the inverse-cdf sampler")

    monkeypatch.setattr(torch, "multinomial", refuse)
    a = _gen(model, 3, path=path, sampler="inverse-cdf", prune_rule="min_p", rho=0.05)
    assert a.mask.any()
    assert a.keep.gather(-1, a.response.unsqueeze(-1)).squeeze(-1)[a.mask].all()


def test_bf16_copy_follows_the_trainer_after_sync():
    trainer = tiny_lm(vocab_size=V, hidden=64, layers=2, seed=1)
    eng = RolloutEngine(trainer, RolloutConfig(path="bf16", backend="hf"))
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(0.05)
    stale = dict(eng.infer.named_parameters())
    assert any(not torch.equal(stale[n], p.bfloat16()) for n, p in trainer.named_parameters())
    eng.sync(trainer)
    for name, p in eng.infer.named_parameters():
        assert p.dtype == torch.bfloat16
        assert torch.equal(p, dict(trainer.named_parameters())[name].bfloat16()), name


FP8_OVER_BF16 = 2.0
"""fp8's mean |Delta| on sampled tokens must exceed bf16's by this factor (measured: ~4x)."""


def test_fp8_mismatch_is_larger_than_bf16(model):
    """The fp8 path (e4m3 Linear weights, 4 mantissa bits) mismatches the trainer more than the
    bf16 path (8 bits): mean |Delta| over the same seeds' sampled tokens, > 2x."""
    mean = {}
    for path in ("bf16", "fp8"):
        runs = sampled_logprobs(model, RolloutConfig(path=path, max_new_tokens=16, backend="hf"),
                                seeds=(0, 1))
        d = torch.cat([(roll - train)[mask] for roll, train, mask in runs]).abs().double()
        assert d.numel() > 400
        mean[path] = float(d.mean())
    assert mean["fp8"] > FP8_OVER_BF16 * mean["bf16"] > 0, mean


@pytest.mark.parametrize("scaling", ["channel", "tensor"])
def test_fp8_copy_is_requantised_at_sync(scaling):
    """After sync the fp8 copy holds the e4m3 round trip of the new trainer weights (fresh
    scales) on the block Linears, their bfloat16 cast elsewhere."""
    trainer = tiny_lm(vocab_size=V, hidden=64, layers=2, seed=1)
    eng = RolloutEngine(trainer, RolloutConfig(path="fp8", fp8_scaling=scaling, backend="hf"))
    with torch.no_grad():
        for p in trainer.parameters():
            p.mul_(2.0).add_(0.05)
    eng.sync(trainer)
    src, fp8 = dict(trainer.named_parameters()), fp8_weight_names(trainer)
    for name, p in eng.infer.named_parameters():
        w = src[name]
        want = fp8_dequantize(*fp8_quantize(w, scaling)) if name in fp8 else w.bfloat16()
        assert p.dtype == torch.bfloat16 and torch.equal(p, want), name


def test_fp8_needs_float8_dtypes(monkeypatch):
    monkeypatch.delattr(torch, "float8_e4m3fn")
    with pytest.raises(ValueError, match=r"fp8 path needs a torch build with float8 dtypes"):
        RolloutConfig(path="fp8")
    RolloutConfig(path="bf16")


@pytest.mark.parametrize("cfg, match", [
    (dict(path="vllm"), "path must be one of"),
    (dict(temperature=0.0), "temperature"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(prune_rule="top_k"), "prune_rule"),
    (dict(path="fp8", fp8_scaling="block"), "fp8_scaling"),
    (dict(sampler="gumbel"), "sampler must be one of"),
])
def test_bad_config_raises(cfg, match):
    with pytest.raises(ValueError, match=match):
        RolloutConfig(**cfg)


def test_bad_generate_input_raises(model):
    eng = RolloutEngine(model, RolloutConfig(path="kv", max_new_tokens=2))
    with pytest.raises(ValueError, match="prompts must be a non-empty"):
        eng.generate([], eos_id=EOS, pad_id=PAD)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        eng.generate([[3], []], eos_id=EOS, pad_id=PAD)
    with pytest.raises(ValueError, match=r"prompts and pad_id must lie in \[0, 256\)"):
        eng.generate([[3, V]], eos_id=EOS, pad_id=PAD)
    with pytest.raises(ValueError, match="eos_id"):
        eng.generate([[3]], eos_id=V, pad_id=PAD)
    with pytest.raises(ValueError, match="float32 trainer"):
        RolloutEngine(tiny_lm(vocab_size=V, hidden=32, layers=1).bfloat16())


def test_left_pad_positions():
    ids, attn, lens = left_pad([[4, 5, 6], [7]], pad_id=0, vocab_size=10)
    assert ids.tolist() == [[4, 5, 6], [0, 0, 7]]
    assert attn.tolist() == [[True, True, True], [False, False, True]]
    assert lens.tolist() == [3, 1]


def test_batch_is_frozen_and_exact_logits_are_the_trainers(model):
    """A rollout batch is built complete: no field can be set afterwards. On ``exact`` with the
    logits asked for (TRM's exact KL) they are the trainer's full forward, bitwise (V1)."""
    import dataclasses

    rb = _gen(model, 3, path="exact", return_logits=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rb.logp = torch.zeros_like(rb.logp)
    with torch.no_grad():
        z = response_logits(model, rb)
    assert torch.equal(rb.logits, z)
    assert torch.equal(rb.logp, token_stats(z, rb.response)["logp"].masked_fill(~rb.mask, 0.0))


def test_the_backend_default_is_written_once():
    """A bare RolloutConfig and a TrainConfig decode on the same default; hf is named, not implied."""
    from tailtheory.engine.config import TrainConfig
    from tailtheory.engine.rollout.engine import DEFAULT_BACKEND

    assert RolloutConfig().backend == TrainConfig().rollout_backend == DEFAULT_BACKEND == "fast"
