"""TRL dump hook (tailtheory/integrations/trl_dump.py): GRPO runs on the CPU write a dump that
``tailtheory.diagnose.read`` reads; without sampler log-probs it fails at once; batches shaped as
the vLLM path gives them are written as documented.

A tiny Qwen2 (V = 64) with the engine's word-level tokenizer, offline. The sampler is a TRL
``rollout_func`` (no vLLM here): the trained model itself in float32 (log-probs equal the
trainer's) or a bfloat16 copy (a real mismatch).
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

pytest.importorskip("trl")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from tailtheory.diagnose.read import expand_dumps, iter_batches, open_dump  # noqa: E402
from tailtheory.integrations.trl import TailGRPOConfig, TailGRPOTrainer  # noqa: E402
from tailtheory.integrations.trl_dump import (DumpingGRPOTrainer,  # noqa: E402
                                              TokenDumpMixin, trainer_logps)
from tests.integrations.test_trl import (_batch, _common, _data, _model, _reward,  # noqa: E402
                                          ROLLOUT_TOKENS, _rollout)
from tailtheory.engine.tasks.tokenizer import build_tokenizer  # noqa: E402

V = 64
C = ROLLOUT_TOKENS
"""max_completion_length of the runs."""


def _dumping(tmp_path, rollout_func=None, cls=DumpingGRPOTrainer, config=GRPOConfig, **kw):
    args = config(**_common(tmp_path / "out", max_completion_length=C, **kw))
    return cls(model=_model(), reward_funcs=_reward, args=args, train_dataset=_data(),
               processing_class=build_tokenizer(V), rollout_func=rollout_func,
               dump_dir=tmp_path / "dump")


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _read(path):
    """Every token row ``tailtheory.diagnose.read`` gives for ``path`` (its public readers)."""
    (f,) = expand_dumps([path])
    dump = open_dump(f)
    assert dump.kind == "generic" and dump.seq_rows
    return dump, list(iter_batches(dump, 0))


# ---- a loud failure without sampler log-probs ----------------------------------------------------

def test_without_vllm_or_rollout_func_fails_at_construction(tmp_path):
    """Plain transformers generation keeps no sampler log-probs: a ValueError naming the fix, at
    construction, and nothing written."""
    with pytest.raises(ValueError, match="use_vllm=True or a rollout_func"):
        _dumping(tmp_path)
    assert not (tmp_path / "dump").exists()


def test_rollout_func_without_logprobs_fails_at_first_batch(tmp_path):
    def no_logprobs(prompts, trainer):
        out = _rollout(torch.float32)(prompts, trainer)
        return {**out, "logprobs": None}

    trainer = _dumping(tmp_path, rollout_func=no_logprobs)
    with pytest.raises(ValueError, match="use_vllm=True or a rollout_func"):
        trainer.train()
    assert (tmp_path / "dump" / "rank0.jsonl").read_text() == ""


def test_needs_dump_dir_and_refuses_an_existing_dump(tmp_path):
    with pytest.raises(ValueError, match="dump_dir"):
        DumpingGRPOTrainer(model=_model(), reward_funcs=_reward,
                           args=GRPOConfig(**_common(tmp_path)), train_dataset=_data(),
                           processing_class=build_tokenizer(V))
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "rank0.jsonl").write_text("")
    with pytest.raises(FileExistsError, match="append=True"):
        _dumping(tmp_path, rollout_func=_rollout(torch.float32))
    trainer = DumpingGRPOTrainer(
        model=_model(), reward_funcs=_reward, args=GRPOConfig(**_common(tmp_path / "o")),
        train_dataset=_data(), processing_class=build_tokenizer(V),
        rollout_func=_rollout(torch.float32), dump_dir=tmp_path / "dump", dump_append=True)
    assert trainer.dump_path == tmp_path / "dump" / "rank0.jsonl"


# ---- real runs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("iterations", [1, 2])
def test_run_writes_every_completion_once_and_diagnose_reads_it(tmp_path, iterations):
    """Two GRPO steps with a float32 sampler: one record per completion (num_iterations = 2 reuses
    each batch; it is written once), logp_train = logp_rollout to float32 precision (so the
    trainer's log-probs are the right ones: TRL's old_per_token_logps at num_iterations = 2, the
    hook's own forward at 1), and the reader gives the generic columns."""
    trainer = _dumping(tmp_path, rollout_func=_rollout(torch.float32), num_iterations=iterations)
    trainer.train()
    path = tmp_path / "dump" / "rank0.jsonl"
    recs = _records(path)
    generations = 2 // iterations
    assert len(recs) == trainer.dump_rows == generations * 4        # per_device_train_batch_size
    assert len({r["sample_id"] for r in recs}) == len(recs)
    assert {r["step"] for r in recs} == set(range(0, 2, iterations))
    for r in recs:
        n = len(r["token_id"])
        assert 1 <= n <= C and r["position"] == list(range(n))
        assert len(r["logp_train"]) == len(r["logp_rollout"]) == n
        assert isinstance(r["advantage"], float)
        for a, b in zip(r["logp_train"], r["logp_rollout"]):
            assert a <= 0 and abs(a - b) < 1e-4, (a, b)
    dump, batches = _read(path)
    tokens = sum(len(r["token_id"]) for r in recs)
    assert sum(len(b.token_id) for b in batches) == tokens
    b = batches[0]
    assert b.advantage is not None and b.ok.all()
    assert b.token_id.tolist()[:len(recs[0]["token_id"])] == recs[0]["token_id"]
    assert abs(b.log_rho).max() < 1e-4


def test_bf16_sampler_gives_a_mismatch(tmp_path):
    """A bfloat16 sampler against the float32 trainer: log rho is not 0 in the dump."""
    trainer = _dumping(tmp_path, rollout_func=_rollout(torch.bfloat16))
    trainer.train()
    _, batches = _read(tmp_path / "dump")
    assert max(abs(b.log_rho).max() for b in batches) > 1e-3


def test_mixes_into_tail_grpo_trainer(tmp_path):
    """With TailGRPOTrainer (per-token advantages, B x T) the advantage is a per-token list."""
    class DumpingTail(TokenDumpMixin, TailGRPOTrainer):
        pass

    trainer = _dumping(tmp_path, rollout_func=_rollout(torch.float32), cls=DumpingTail,
                       config=TailGRPOConfig, tail_method="ar", max_steps=1)
    trainer.train()
    recs = _records(tmp_path / "dump" / "rank0.jsonl")
    assert recs and all(len(r["advantage"]) == len(r["token_id"]) for r in recs)


# ---- the vLLM path, with the batch TRL would pass ------------------------------------------------

def test_vllm_shaped_batch(tmp_path):
    """The micro-batch as TRL 1.16 builds it with vLLM (old_per_token_logps, NaN sampler
    log-probs where vLLM could not score, importance_sampling_ratio, a tool_mask): logp_train is
    TRL's old_per_token_logps, NaN is written as null, tool tokens are left out; the loss is TRL's
    own."""
    trainer = _dumping(tmp_path, rollout_func=_rollout(torch.float32))
    ref = GRPOTrainer(model=copy.deepcopy(trainer.model), reward_funcs=_reward,
                      args=GRPOConfig(**_common(tmp_path / "ref", max_completion_length=C)),
                      train_dataset=_data(), processing_class=build_tokenizer(V))
    batch = _batch()
    B, T = batch["completion_ids"].shape
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(B, T, generator=g) * 3
    roll = old + 0.1 * torch.randn(B, T, generator=g)
    roll[0, 1] = float("nan")
    tool = torch.ones(B, T, dtype=torch.long)
    tool[2, 2:4] = 0
    batch.update(old_per_token_logps=old, sampling_per_token_logps=roll, tool_mask=tool,
                 importance_sampling_ratio=torch.ones(B, T))
    for t in (trainer, ref):
        t.model.train()
        t.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, batch)
    want = ref.compute_loss(ref.model, batch)
    assert torch.equal(loss.detach(), want.detach())
    recs = _records(trainer.dump_path)
    mask = (batch["completion_mask"] * tool).bool()
    assert len(recs) == B and recs[0]["sample_id"] == "g0-m0-0"
    assert recs[0]["logp_rollout"][1] is None                     # vLLM's unscored token
    assert recs[2]["position"] == [i for i in range(T) if mask[2, i]]
    for i, r in enumerate(recs):
        assert r["token_id"] == batch["completion_ids"][i][mask[i]].tolist()
        assert r["logp_train"] == pytest.approx(old[i][mask[i]].tolist(), abs=1e-6)
        assert r["advantage"] == pytest.approx(float(batch["advantages"][i]))
    _, batches = _read(trainer.dump_path)
    assert sum(int((~b.ok).sum()) for b in batches) == 1          # the null token, excluded
    del batch["sampling_per_token_logps"]
    with pytest.raises(ValueError, match="use_vllm=True or a rollout_func"):
        trainer.compute_loss(trainer.model, batch)
    trainer.model.eval()                                           # evaluation: nothing written
    n = len(_records(trainer.dump_path))
    trainer.compute_loss(trainer.model, {**batch, "sampling_per_token_logps": roll})
    assert len(_records(trainer.dump_path)) == n


def test_trainer_logps_equal_trls(tmp_path):
    """The hook's own forward (used when TRL computed no old_per_token_logps) gives TRL's
    per-token log-probs on the same batch."""
    trainer = _dumping(tmp_path, rollout_func=_rollout(torch.float32))
    batch = _batch()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        want, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attn, batch["completion_ids"].shape[1])
    got = trainer_logps(trainer.model, batch, trainer.args.temperature)
    m = batch["completion_mask"].bool()
    assert torch.allclose(got[m], want[m], atol=1e-5, rtol=0)
    assert all(math.isfinite(x) for x in got[m].tolist())
