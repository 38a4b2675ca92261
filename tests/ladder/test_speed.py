"""The ``step`` part of the size effects (``tailtheory/ladder/speed.py``): a GRPO step timed on
a copy of the model (the model is left as it was), its FLOP share computed as documented, and the
``ladder`` command offering every part."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.engine.tasks.task import get_task
from tailtheory.experiments.policies import grpo_config
from tailtheory.ladder.speed import matmul_params, matmul_peak, step_numbers


def test_step_numbers_time_a_copy():
    model = tiny_lm(vocab_size=512, hidden=32, layers=1, heads=2, kv_heads=1, seed=0)
    task = get_task("kk", n_people=2)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = replace(grpo_config("learn"), prompts_per_step=2, group_size=2, max_new_tokens=16)
    out = step_numbers(model, task, seed=1, cfg=cfg)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # left as it was
    assert out["response_tokens"] > 0 and out["sequence_tokens"] > out["response_tokens"]
    assert 0 < out["rollout_s"] < out["step_s"] and out["peak_gflops"] > 0
    assert out["update_peak_share"] == pytest.approx(
        6 * matmul_params(model) * out["sequence_tokens"] / out["update_s"] / 1e9
        / out["peak_gflops"])
    assert matmul_params(model) == sum(p.numel() for p in model.parameters()) - 512 * 32
    assert matmul_peak(64, 1) > 0
