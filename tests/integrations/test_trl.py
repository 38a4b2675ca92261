"""TRL adapter (tailtheory/integrations/trl.py): the same loss as TRL's, and every method trains.

A tiny Qwen2 (V = 64) with the engine's word-level tokenizer, on the CPU, offline.
"""

from __future__ import annotations

import copy
from dataclasses import fields

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from tailtheory.core.models import tiny_lm  # noqa: E402
from tailtheory.engine.registry import parse_methods  # noqa: E402
from tailtheory.engine.tasks.tokenizer import build_tokenizer  # noqa: E402
from tailtheory.engine.types import MethodParams  # noqa: E402
from tailtheory.integrations.trl import (TRL_OWNED, TailGRPOConfig,  # noqa: E402
                                         TailGRPOTrainer)

V = 64
ATOL = 1e-6
"""float32 loss / gradient agreement with TRL: both run the same fused forward."""


ROLLOUT_TOKENS = 4
"""The runs' ``max_completion_length``: the tokens a test's ``rollout_func`` samples."""


def _model(seed: int = 0):
    return tiny_lm(vocab_size=V, hidden=16, layers=1, heads=2, kv_heads=1, seed=seed)


def _data(n: int = 8) -> Dataset:
    prompts = ["P0 : T", "P1 : F", "P2 : ( T )", "P0 = P1 ?"] * (n // 4)
    return Dataset.from_dict({"prompt": prompts})


def _reward(completions, **_):
    return [float(c.count("T")) - 0.5 * float(c.count("F")) for c in completions]


def _common(tmp_path, **kw) -> dict:
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                max_completion_length=ROLLOUT_TOKENS, max_steps=2, learning_rate=1e-2,
                use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                disable_tqdm=True, seed=0, bf16=False, dataloader_num_workers=0,
                gradient_checkpointing=False)
    return {**base, **kw}


def _trainer(cls, args, model=None, **kw):
    return cls(model=model or _model(), reward_funcs=_reward, args=args,
               train_dataset=_data(), processing_class=build_tokenizer(V), **kw)


# ---- the config ------------------------------------------------------------------------------

def test_config_fields_are_method_params(tmp_path):
    """One default per knob: every non-TRL MethodParams field, same name and default."""
    cfg = TailGRPOConfig(**_common(tmp_path))
    own = {f.name: f for f in fields(TailGRPOConfig)}
    for f in fields(MethodParams):
        if f.name in TRL_OWNED:
            continue
        assert own[f.name].default == f.default, f.name
    hp = cfg.method_params()
    assert hp.eps_low == cfg.epsilon and hp.temperature == cfg.temperature
    assert hp.loss_agg == "token-mean"                      # TRL's default loss_type, dapo
    assert TailGRPOConfig(**_common(tmp_path), alpha=0.7).method_params().alpha == 0.7


@pytest.mark.parametrize("kw, match", [
    ({"tail_method": "nope"}, "valid methods"),
    ({"alpha": 2.0}, "alpha"),
    ({"loss_type": "cispo"}, "loss_type"),
    ({"beta": 0.1}, "beta"),
    ({"tail_method": "ar+lopti"}, "num_iterations"),
    ({"tail_method": "dr_grpo"}, "dr_grpo"),
    ({"tail_method": "dvp"}, "min_p"),
])
def test_config_rejects(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        TailGRPOConfig(**_common(tmp_path, **kw))


def test_trainer_needs_tail_config(tmp_path):
    with pytest.raises(ValueError, match="TailGRPOConfig"):
        _trainer(TailGRPOTrainer, GRPOConfig(**_common(tmp_path)))


# ---- the loss equals TRL's own -----------------------------------------------------------------

def _batch(B: int = 6, P: int = 4, C: int = 5, seed: int = 0) -> dict:
    """A batch as ``GRPOTrainer.compute_loss`` receives it: left-padded prompts, right-padded
    completions, advantages (B,), TRL's ``num_items_in_batch``."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(4, V, (B, P), generator=g)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[0, :2] = 0
    prompt_ids[0, :2] = 0
    completion_ids = torch.randint(4, V, (B, C), generator=g)
    lens = torch.tensor([C, 2, C, 4, 1, 3])[:B]
    completion_mask = (torch.arange(C)[None] < lens[:, None]).long()
    completion_ids = completion_ids.masked_fill(completion_mask == 0, 0)
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": torch.randn(B, generator=g),
            "num_items_in_batch": completion_mask.sum()}


def _loss_and_grads(trainer, batch):
    model = trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer._compute_loss(model, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                           if p.grad is not None}


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("is_ratio", [False, True])
def test_grpo_loss_and_grad_equal_trl(tmp_path, loss_type, is_ratio):
    """tail_method='grpo' + loss_type X: TailGRPOTrainer's loss and .grad are TRL's on the same
    batch, pi_old shifted so the clip binds; with is_ratio, TRL's own vLLM IS weights too."""
    kw = _common(tmp_path, loss_type=loss_type, epsilon=0.2, epsilon_high=0.28,
                 scale_rewards="none" if loss_type == "dr_grpo" else "group")
    ref = _trainer(GRPOTrainer, GRPOConfig(**kw), model=_model())
    tail = _trainer(TailGRPOTrainer, TailGRPOConfig(**kw), model=copy.deepcopy(ref.model))
    batch = _batch()
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        logp, _, _ = ref._get_per_token_logps_and_entropies(ref.model, ids, attn, 5)
    g = torch.Generator().manual_seed(1)
    batch["old_per_token_logps"] = logp + 0.6 * torch.randn(logp.shape, generator=g)
    if is_ratio:
        batch["importance_sampling_ratio"] = torch.rand(logp.shape, generator=g) * 2
        for t in (ref, tail):
            t.use_vllm, t.vllm_importance_sampling_correction = True, True
    loss_ref, grad_ref = _loss_and_grads(ref, batch)
    loss_tail, grad_tail = _loss_and_grads(tail, batch)
    assert float(tail._metrics["train"]["tail/loss/clipfrac"][-1]) > 0   # the clip binds
    assert torch.allclose(loss_tail, loss_ref, atol=ATOL, rtol=0), (loss_tail, loss_ref)
    assert grad_ref.keys() == grad_tail.keys() and grad_ref
    for n in grad_ref:
        assert torch.allclose(grad_tail[n], grad_ref[n], atol=ATOL, rtol=1e-5), n


# ---- every method trains -------------------------------------------------------------------------

CORRECTIONS = "tis+seq_tis+mis+icepop+token_reject+seq_reject+geo_reject+trm"

RUNS = {
    "grpo": {"loss_type": "grpo"},
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
    "ar+lopti": {"num_iterations": 2},
    "otb": {},
    "dvp": {"min_p": MethodParams.dvp_rho},
    CORRECTIONS: {"trm_estimator": "k2k3"},
    "trm": {},                                           # exact: pi_roll = pi_old, KL 0
}


def _train(tmp_path, method: str, rollout_func=None, **kw):
    args = TailGRPOConfig(**_common(tmp_path, tail_method=method, **kw))
    trainer = _trainer(TailGRPOTrainer, args, rollout_func=rollout_func)
    trainer.train()
    return trainer, [h for h in trainer.state.log_history if "loss" in h]


@pytest.mark.parametrize("method", list(RUNS))
def test_method_trains_and_logs(tmp_path, method):
    """Two CPU steps; every metric key the spec's methods declare is in TRL's logs (tail/...),
    finite, and the weights moved. Without a rollout engine pi_roll = pi_old: no mismatch."""
    trainer, logs = _train(tmp_path, method, **RUNS[method])
    assert len(logs) == 2
    keys = {"tail/" + k for k in parse_methods(method).metric_keys} | {
        "tail/mismatch/abs_mean", "tail/mismatch/k3", "entropy"}
    seen = {k: float(h[k]) for h in logs for k in h}
    assert not keys - seen.keys(), keys - seen.keys()
    assert all(torch.isfinite(torch.tensor(seen[k])) for k in keys)
    assert seen["tail/mismatch/abs_max"] == 0.0
    moved = any((p.detach() != q).any() for p, q in zip(trainer.model.parameters(),
                                                        _model().parameters()))
    assert moved


def test_lopti_passes_are_trl_iterations(tmp_path):
    """LOPTI (L3) as num_iterations = 2: iteration 0 updates the tokens with pi_old < eta, iteration
    1 the rest, on the same generation batch."""
    _, logs = _train(tmp_path, "lopti", num_iterations=2, eta=1.0 / V)
    low = logs[0]["tail/lopti/low_frac"]
    assert 0 < low < 1                                  # both passes have tokens at eta = 1/V
    assert logs[0]["tail/loss/active_frac"] == pytest.approx(low)
    assert logs[1]["tail/loss/active_frac"] == pytest.approx(1 - low)
    assert "tail/lopti/low_frac" not in logs[1]           # no new generation on iteration 1


def _rollout(dtype):
    """A TRL ``rollout_func`` sampling with the policy (a copy in ``dtype``) and returning the
    sampler's own log-probs of the sampled tokens (raw logits: temperature 1, no top-k / top-p)."""
    def rollout(prompts, trainer):
        tok = trainer.processing_class
        model = trainer.model
        if dtype != torch.float32:  # a fresh copy: TRL's patched forward would run the original
            model = _model()
            model.load_state_dict(trainer.model.state_dict())
            model.to(dtype)
        p_ids, c_ids, lps = [], [], []
        for text in prompts:                   # TRL's sampler already repeats each prompt
            ids = tok(text, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), do_sample=True,
                                     max_new_tokens=ROLLOUT_TOKENS, top_k=0, top_p=1.0,
                                     output_logits=True,
                                     return_dict_in_generate=True, pad_token_id=tok.pad_token_id,
                                     eos_token_id=tok.eos_token_id)
            new = out.sequences[0, len(ids):].tolist()
            lp = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.logits, new)]
            p_ids.append(ids)
            c_ids.append(new)
            lps.append(lp)
        return {"prompt_ids": p_ids, "completion_ids": c_ids, "logprobs": lps}
    return rollout


def test_rollout_logprobs_give_a_real_mismatch(tmp_path):
    """With rollout log-probs (a bf16 sampler via TRL's rollout_func), log_rho is not 0 and the
    corrections act: the per-token mismatch metrics in TRL's logs are positive."""
    _, logs = _train(tmp_path, "tis+icepop", rollout_func=_rollout(torch.bfloat16))
    for h in logs:
        assert h["tail/mismatch/abs_mean"] > 0 and h["tail/mismatch/k3"] > 0
        assert h["tail/tis/weight_mean"] != 1.0
