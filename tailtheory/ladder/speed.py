"""The GRPO step's speed at a rung of the model-size ladder: the ``step`` part of
:mod:`tailtheory.ladder.effects`.

On a rung's warm start, one warm-up and one timed step of the ``matched`` recipe's GRPO
(:func:`tailtheory.engine.trainer.train_step`, seed = the part's seed) on the current thread
count, beside this machine's float32 matmul peak measured in the same process
(:func:`matmul_peak`). Stored per seed: the step's, the rollout's and the update's seconds, the
response tokens per second, and the update's share of the peak. FLOPs are an approximation, said
so wherever they are shown: ``6 N`` per sequence token for the update (one GRPO pass, forward and
backward; its first forward is the ``pi_old`` forward) with ``N`` the matmul parameters
(everything but the input embedding); attention's score products, padding, norms, the sampler
and the optimiser are left out.
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import torch

from tailtheory.engine.devices import model_generator
from tailtheory.engine.rollout.engine import RolloutEngine
from tailtheory.engine.trainer import rollout_config, train_step
from tailtheory.experiments.policies import grpo_config

PEAK_N, PEAK_REPEATS = 1024, 5
"""The matmul peak's square size and its repeats (the best one is kept)."""


def matmul_peak(n: int = PEAK_N, repeats: int = PEAK_REPEATS) -> float:
    """Best float32 GFLOP/s of an ``n``-square ``torch.mm`` on the CPU, on the current thread
    count (``2 n^3`` FLOPs a product)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)                                                       # warm-up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def matmul_params(model) -> int:
    """Parameters outside the input embedding (the untied output head included)."""
    emb = model.get_input_embeddings().weight
    return sum(p.numel() for p in model.parameters() if p is not emb)


def step_numbers(model, task, seed: int, cfg=None) -> dict:
    """The ``step`` part of one seed (module docstring); ``cfg``: a ``TrainConfig`` for the
    batch (default the ``matched`` recipe's GRPO). The steps train a copy: ``model`` is left
    as it was, for the parts measured after this one."""
    c = replace(cfg or grpo_config("matched"), seed=seed)
    model = copy.deepcopy(model).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay,
                            foreach=True)
    engine = RolloutEngine(model, rollout_config(c, task))
    gen = model_generator(model, seed)
    peak = matmul_peak()
    train_step(0, c, task, model, engine, opt, gen)                     # warm-up
    metrics, rec = train_step(1, c, task, model, engine, opt, gen)
    step_s, roll_s = metrics["time/step_s"], metrics["time/rollout_s"]
    response = int(rec.rb.mask.sum())
    sequence = int(rec.rb.attention_mask.sum())
    update_flops = 6 * matmul_params(model) * sequence
    return {"step_s": step_s, "rollout_s": roll_s, "update_s": step_s - roll_s,
            "response_tokens": response, "sequence_tokens": sequence,
            "tokens_per_s": response / step_s, "peak_gflops": peak,
            "update_gflops": update_flops / (step_s - roll_s) / 1e9,
            "update_peak_share": update_flops / (step_s - roll_s) / 1e9 / peak,
            "threads": torch.get_num_threads()}
