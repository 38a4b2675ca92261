"""The noise rollout paths ``logit_noise`` / ``weight_noise`` (``tailtheory/engine/rollout/noise.py``, V6).

A tiny random Qwen2 (V = 256) for the engine-level checks and the trainer's tiny ``SMALL`` runs
with the dense-reward ``kk`` of ``test_trainer`` for the training-level ones. At ``sigma = 0``
both paths are the ``kv`` path bitwise (same tokens, same log-probs), so their log-probs equal
the trainer's to float32 rounding (the incremental decode's reduction order; ``F32_TOL``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.core.safeset import safe_vocab_mask
from tailtheory.engine import trainer
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rollout.copies import fp8_weight_names
from tailtheory.engine.load import load_model
from tailtheory.engine.rollout.noise import (NOISE_PATHS, RolloutNoise, check_noise, noise_seed,
                                     noisy_weights)
from tailtheory.engine.policy_forward import response_logits, response_logprobs
from tailtheory.engine.rollout.engine import PATHS, RolloutConfig, RolloutEngine
from tailtheory.engine.checkpoint import read_metrics
from tailtheory.engine.trainer import train
from tests.engine.test_trainer import SMALL, DenseKK, no_time

pytestmark = pytest.mark.usefixtures("one_thread")

V, EOS, PAD = 256, 1, 0
PROMPTS = [[5, 6, 7]] * 4 + [[8, 9, 10, 11]] * 4 + [[12]] * 4 + [[13, 14]] * 4
F32_TOL = 1e-5
BACKENDS = ("fast", "hf")


@pytest.fixture(scope="module")
def model():
    return tiny_lm(vocab_size=V, hidden=64, layers=2, heads=4, kv_heads=2, seed=0).eval()


def rollout(model, path, sigma=0.0, backend="fast", seed=0, step=None, **kw):
    eng = RolloutEngine(model, RolloutConfig(path=path, noise=sigma, backend=backend,
                                             max_new_tokens=12, **kw))
    if step is not None:
        eng.sync(model, step=step)
    return eng.generate(PROMPTS, eos_id=EOS, pad_id=PAD,
                        generator=torch.Generator().manual_seed(seed))


def test_noise_paths_are_rollout_paths():
    assert set(NOISE_PATHS) <= set(PATHS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", NOISE_PATHS)
def test_zero_sigma_is_the_kv_path_bitwise(model, path, backend):
    """``z + 0`` and ``w * 1`` are ``z`` and ``w``: the kv rollout exactly; the trainer's
    log-probs to float32 rounding."""
    kv, noisy = rollout(model, "kv", backend=backend), rollout(model, path, 0.0, backend)
    assert torch.equal(noisy.response, kv.response) and torch.equal(noisy.logp, kv.logp)
    with torch.no_grad():
        train_lp = response_logprobs(model, noisy)
    assert (noisy.logp - train_lp)[noisy.mask].abs().max() <= F32_TOL


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", NOISE_PATHS)
def test_same_seed_and_step_same_rollout_bitwise(model, path, backend):
    a, b = (rollout(model, path, 0.3, backend, step=3) for _ in range(2))
    assert torch.equal(a.response, b.response) and torch.equal(a.logp, b.logp)
    other = rollout(model, path, 0.3, backend, step=4)  # another step: other noise
    assert not torch.equal(other.logp, a.logp)


def test_noise_seeds_differ():
    seeds = {noise_seed(s, t, k) for s in range(3) for t in range(3) for k in ("logit", "weight")}
    assert len(seeds) == 18 and noise_seed(1, 2, "logit") == noise_seed(1, 2, "logit")


@pytest.mark.parametrize("backend", BACKENDS)
def test_logit_noise_logp_is_the_noisy_softmax(model, backend):
    """The reported log-prob is ``log softmax_S((z + delta) / tau)`` at the sampled token for
    the recorded ``delta`` (bitwise), ``S`` pruned on the noisy logits; ``z`` is the trainer's to
    float32 rounding; ``delta`` is N(0, sigma^2) from the step's seeded stream."""
    sigma, tau = 0.5, 0.7
    rb = rollout(model, "logit_noise", sigma, backend, step=2, temperature=tau,
                 return_logits=True, prune_rule="min_p", rho=1e-2)
    m = rb.mask
    zs = rb.logits / tau     # bitwise below: the sampler's row-by-row ops on the same values
    assert torch.equal(rb.keep[m], safe_vocab_mask(zs, rule="min_p", threshold=1e-2)[m])
    lp = torch.log_softmax(zs.masked_fill(~rb.keep, float("-inf")), -1)
    lp = lp.gather(-1, rb.response[..., None])[..., 0]
    assert torch.equal(lp[m], rb.logp[m])
    with torch.no_grad():
        z = response_logits(model, rb)
    assert ((rb.logits - rb.noise) - z)[m].abs().max() <= F32_TOL * (1 + z.abs().max())
    d = rb.noise[m]
    assert abs(float(d.std()) / sigma - 1) < 0.02 and abs(float(d.mean())) < 0.02 * sigma
    assert not rb.noise[~m].any()
    g = torch.Generator().manual_seed(noise_seed(0, 2, "logit"))  # first position: all rows
    assert torch.equal(rb.noise[:, 0], sigma * torch.randn(len(PROMPTS), V, generator=g))


def _rel(noisy: dict, model) -> torch.Tensor:
    named = {n: p.detach() for n, p in model.named_parameters()}
    return torch.cat([(noisy[n].detach() / named[n] - 1).flatten() for n in sorted(noisy)])


def test_weight_noise_relative_std_and_redrawn(model):
    sigma = 0.05
    noise = RolloutNoise("weight_noise", sigma, seed=7)
    w0 = noise.weights(model)
    assert set(w0) == fp8_weight_names(model)  # the blocks' Linear weights, not head or embed
    rel = _rel(w0, model)
    assert abs(float(rel.std()) / sigma - 1) < 0.02 and abs(float(rel.mean())) < 0.02 * sigma
    noise.at(1)
    w1 = noise.weights(model)
    assert all(not torch.equal(w0[n], w1[n]) for n in w0)
    noise.at(0)
    assert all(torch.equal(w0[n], w) for n, w in noise.weights(model).items())
    g = torch.Generator().manual_seed(noise_seed(7, 0, "weight"))
    assert all(torch.equal(w0[n], w) for n, w in noisy_weights(model, sigma, g).items())


def test_weight_noise_engines_serve_the_noisy_weights(model):
    """The fast engine's q/k/v (hf: the copy's weights) are the noisy ones, redrawn at a sync;
    the rest of the copy is the trainer's."""
    sigma = 0.05
    fast = RolloutEngine(model, RolloutConfig(path="weight_noise", noise=sigma, backend="fast"))
    hf = RolloutEngine(model, RolloutConfig(path="weight_noise", noise=sigma, backend="hf"))
    a = model.get_decoder().layers[0].self_attn
    w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach()
    rel = fast.fast.layers[0][2] / w - 1
    assert abs(float(rel.std()) / sigma - 1) < 0.05
    infer = dict(hf.infer.named_parameters())
    names = fp8_weight_names(model)
    assert torch.allclose(_rel({n: infer[n] for n in names}, model).std(),
                          torch.tensor(sigma), rtol=0.02)
    for n, p in model.named_parameters():
        assert torch.equal(infer[n], p) != (n in names), n
    before_fast, before_hf = fast.fast.layers[0][2].clone(), infer[sorted(names)[0]].clone()
    fast.sync(model)
    hf.sync(model)
    assert not torch.equal(fast.fast.layers[0][2], before_fast)
    assert not torch.equal(dict(hf.infer.named_parameters())[sorted(names)[0]], before_hf)


@pytest.mark.parametrize("sigma, match", [
    (-0.1, "finite number >= 0"), (float("nan"), "finite number >= 0"),
    (float("inf"), "finite number >= 0"), ("0.1", "finite number >= 0"),
])
def test_bad_noise_values_are_refused(sigma, match):
    for path in NOISE_PATHS:
        with pytest.raises(ValueError, match=match):
            RolloutConfig(path=path, noise=sigma)
        with pytest.raises(ValueError, match=f"rollout_noise must be a {match}"):
            TrainConfig(rollout=path, rollout_noise=sigma)


def test_noise_only_on_the_noise_paths():
    with pytest.raises(ValueError, match="adds no noise"):
        RolloutConfig(path="kv", noise=0.1)
    with pytest.raises(ValueError, match="rollout_noise 0.1 is set but rollout path 'bf16'"):
        TrainConfig(rollout="bf16", rollout_noise=0.1)
    for path in NOISE_PATHS:  # a run asks for a size; the engine allows 0 (the kv path)
        with pytest.raises(ValueError, match=f"the {path} rollout path needs rollout_noise > 0"):
            TrainConfig(rollout=path)
        RolloutConfig(path=path, noise=0.0)
    with pytest.raises(ValueError, match="must be one of"):
        RolloutNoise("kv", 0.1)
    check_noise("kv", 0)


def test_zero_noise_stays_out_of_the_run_key():
    from tailtheory.experiments.recipes import recipe_config
    from tailtheory.experiments.runs import run_key

    cfg = recipe_config("learn", seed=1, device="cpu")  # the key names the resolved device
    assert run_key(cfg) == "4dad3e9d063abf78"
    noisy = replace(cfg, rollout="logit_noise", rollout_noise=0.1)
    assert run_key(noisy) != run_key(replace(noisy, rollout_noise=0.2))


def test_cli_rollout_noise_flag(tmp_path):
    import json

    from tailtheory.cli import main

    out = tmp_path / "cli"
    assert main(["train", "--task", "kk", "--n-people", "2", "--model", "tiny", "--rollout",
                 "logit_noise", "--rollout-noise", "0.2", "--steps", "1", "--prompts-per-step",
                 "2", "--group-size", "2", "--eval-every", "0", "--out", str(out),
                 "--quiet"]) == 0
    stored = json.loads((out / "config.json").read_text())
    assert (stored["rollout"], stored["rollout_noise"]) == ("logit_noise", 0.2)
    assert read_metrics(out)[0]["mismatch/k3"] > 0


def _run(tmp_path, name, **kw) -> list[dict]:
    cfg = TrainConfig(**{**SMALL, "eval_every": 0, **kw}, out=str(tmp_path / name))
    train(cfg, progress=False, task=DenseKK())
    return read_metrics(cfg.out)


@pytest.mark.parametrize("path", NOISE_PATHS)
def test_tiny_training_runs_and_k3_grows_with_sigma(path, tmp_path):
    """Two steps at each of three sizes: finite metrics, and the step's mean k3 of
    ``log pi_train / pi_roll`` rises with sigma."""
    k3 = []
    for sigma in (0.01, 0.1, 1.0):
        lines = _run(tmp_path, f"s{sigma}", rollout=path, rollout_noise=sigma, steps=2)
        assert [m["step"] for m in lines] == [0, 1]
        for m in lines:
            assert all(math.isfinite(v) for v in m.values() if isinstance(v, (int, float))), m
        k3.append([m["mismatch/k3"] for m in lines])
    for step in range(2):
        assert 0 < k3[0][step] < k3[1][step] < k3[2][step], k3


def test_resume_of_a_noisy_run_matches_the_straight_run(tmp_path):
    """The step seeds the noise: a run resumed after step 1 draws what the straight run drew."""
    kw = dict(rollout="weight_noise", rollout_noise=0.3, checkpoint_every=1)
    straight = _run(tmp_path, "straight", steps=2, **kw)
    _run(tmp_path, "cut", steps=1, **kw)
    cfg = TrainConfig(**SMALL, eval_every=0, steps=2, **kw, out=str(tmp_path / "cut"))
    train(cfg, resume=True, progress=False, task=DenseKK())
    assert no_time(read_metrics(cfg.out)) == no_time(straight)


def test_held_out_evaluation_is_noise_free(tmp_path, monkeypatch):
    """``eval/accuracy`` samples the trainer's weights on the float32 ``kv`` path: the same at
    step 0 for a noisy run and the exact run of the same seed, with no noise drawn for it."""
    kw = dict(steps=1, eval_every=1, eval_n=32)
    exact = _run(tmp_path, "exact", rollout="exact", **kw)
    acc = exact[0]["eval/accuracy"]
    assert 0 < acc < 1  # DenseKK's correct = first token 4 mod 5: not a trivial 0
    for path in NOISE_PATHS:
        assert _run(tmp_path, path, rollout=path, rollout_noise=1.0, **kw)[0][
            "eval/accuracy"] == acc
    drawn = []
    for name in ("delta", "weights"):
        real = getattr(RolloutNoise, name)
        monkeypatch.setattr(RolloutNoise, name,
                            lambda self, *a, _r=real: drawn.append(1) or _r(self, *a))
    task = DenseKK()
    model = load_model(TrainConfig(**SMALL), task)
    for path in NOISE_PATHS:
        cfg = TrainConfig(**SMALL, rollout=path, rollout_noise=1.0, eval_n=32)
        assert trainer._evaluate(0, cfg, task, model) == acc
    assert not drawn
