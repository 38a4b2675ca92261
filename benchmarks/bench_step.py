"""One full GRPO step at 256 responses: the previous engine, today's engine and TRL, side by side.

What is timed: one optimiser step = rollout (sampling 256 responses) + rewards + advantages +
the update (forward, backward, AdamW step), for

- (a) the previous engine: ``TrainConfig(rollout_backend="hf", micro_batch=0, rollout="kv")``:
  the Hugging Face KV-cache decoding, one forward / backward over the whole batch;
- (b) today's engine: ``rollout_backend="fast", micro_batch=64`` (``tailtheory.engine.rollout.fast``
  for the rollout, micro-batches of 64 rows of similar length for the update), rollout path
  ``kv`` (float32) and, as (b'), ``bf16``;
- (c) TRL's ``GRPOTrainer`` (transformers ``generate`` for the rollout; its loader's default
  ``sdpa`` attention), ``per_device_train_batch_size = 64``, ``gradient_accumulation_steps = 4``
  (so ``generation_batch_size = 256``: one generation of 256 completions, then 4 micro-batches
  of 64, one optimiser step), ``num_generations = 8``, gradient checkpointing off, ``beta = 0``,
  loss ``dapo`` (token mean), clip 0.2 / 0.24 (as ``bench_trl.py``).

Settings, shared by all: one torch thread; a random Qwen2-style model of the kk_trace warm
start's size (``tiny_lm(vocab_size=512, hidden=128, layers=4, heads=4, kv_heads=2)``, 723,072
parameters, 655,360 of them in matmuls) saved once and loaded by each contender; 32 ``kk``
prompts x 8 responses per step (the engine's problem stream: step ``s`` draws
``task.problems(32, seed=1000 + s)``; TRL reads the same prompts in the same order, dataset
shuffling off), prompts of 23-32 tokens; ``max_new_tokens = 100`` with EOS never sampled, so
every response is exactly 100 tokens (25,600 response tokens a step for everyone); temperature
1, float32 training, AdamW, lr 1e-4. EOS is kept out of the samples by the model's weights, the
one thing every contender loads (no contender can take an LM-head bias): every token's embedding
gets 1.0 in channel 0, which then dominates the RMS-normalised final hidden state (~11), and the
LM-head row of EOS gets -3 in that channel: an EOS logit ~33 below the others. The FLOPs of
a step do not depend on the weights' values. Each contender runs ``WARMUP`` = 1 step, then
``STEPS`` = 3 timed steps (the median is reported; TRL 2 if its timed step passes 60 s). The
engine's times are its own ``time/step_s`` / ``time/rollout_s`` metrics; TRL's step is the
trainer's ``on_step_begin`` -> ``on_step_end`` (generation included) and its rollout the
``_generate_single_turn`` call. "update" = step - rollout (rewards, advantages, the forward, the
backward, the optimiser step). Tokens/s count response tokens (25,600 a step).

Peak: the best of ``PEAK_REPEATS`` float32 ``torch.mm`` (2048 x 2048 @ 2048 x 2048, 2 n^3
FLOPs) on the same thread, at the start and at the end of the run. FLOPs of a step (an
approximation, counted once from the prompts and lengths, the same for every contender: the
work a step needs, not what each runs): rollout ~ 2 N x (prompt tokens prefilled once per
distinct prompt, as (b) does + 256 x 99 decoded tokens) + attention (4 x layers x 128 x context
per token, causal context); update ~ 6 N x (prompt + response tokens of the 256 rows: one
forward, whose graph the engine keeps from its ``pi_old`` forward, and one backward at twice
its cost) + 3 x the forward's attention. N = 655,360 matmul parameters (q/k/v/o, gate/up/down,
LM head; the embedding lookup and the norms are not matmuls); padding, softmax, norms, the
sampler and the optimiser are left out.

Run (needs ``trl``: the ``bench`` or ``dev`` extra): ``HF_HUB_OFFLINE=1 .venv/bin/python
benchmarks/bench_step.py`` (``--workload fixed``, the default: the setting above) ->
``benchmarks/results/step.json`` (~2 minutes on this CPU); ``--workload recipe`` (below) ->
``benchmarks/results/step_recipe.json`` (~1 minute with the warm start cached). ``--profile``
instead prints a ``torch.profiler`` table of one (b) step (after a warm-up step) of the workload.

Measured on 2026-11-24 (2-core x86_64 CPU, torch 2.13 CPU build, transformers 5.23, TRL 1.16,
one thread). The machine was shared: load average 3.0-3.2 throughout (two other busy processes
on the 2 cores), so the times are those of a contended core; see ``step.json``.

=========================  ======  ========  ============  ============  ======  ======  ======
contender                  step s  tokens/s  rollout s     update s      vs (a)  vs (c)  % peak
                                             (tokens/s)    (tokens/s)
=========================  ======  ========  ============  ============  ======  ======  ======
(a) previous engine, kv      6.89     3,714  3.25 (7,884)  3.65 (7,023)    1.00    0.71    15.9
(b) today's engine, kv       4.14     6,188  1.52 (16.9k)  2.62 (9,762)    1.67    1.18    26.4
(b') today's engine, bf16    4.65     5,511  1.68 (15.3k)  3.00 (8,530)    1.48    1.05    23.6
(c) TRL GRPOTrainer          4.89     5,237  2.25 (11.4k)  2.63 (9,728)    1.41    1.00    22.4
=========================  ======  ========  ============  ============  ======  ======  ======

- Peak: 165 GFLOP/s (both measurements). A step is ~181 GFLOP (rollout 38.5, update 142.1):
  (b) reaches 26% of the peak, its rollout 15% and its update 33%.
- (b) is 1.7x (a) and 1.2x TRL in tokens/s of the whole step: the rollout is 2.1x (a)'s and
  1.5x TRL's, but the update, ~2/3 of (b)'s step, is 1.4x (a)'s and equal to TRL's (which
  also runs micro-batches of 64). (a)'s whole-batch update varied most: 3.4 to 7.9 s a step
  (its steps 11.1, 6.9, 6.6 s). TRL with ``per_device_train_batch_size = 256`` (one
  micro-batch) took 7.2 s a step in a trial run (3.6k tokens/s): 64 x 4 is its faster setting.
- Where (b)'s step goes (``--profile``): rollout, attention ``bmm`` over the KV cache 35%,
  ``torch.multinomial``'s ``exponential_`` 19% (~3 ms a decode step), GEMMs 18%; update,
  ``mm`` 26% (~0.86 s for ~128 GFLOP: ~90% of the peak), elementwise and memory ops ~45%
  (``mul`` 15%, ``copy_`` 11%, ``fill_`` 7%, ``cat`` 6%, ``add`` 4%: norms, rotary, softmax,
  the per-token statistics over ``(B, T, V)``, padding micro-batches back to ``(B, T)``),
  eager attention ``bmm`` 11%.

Workload ``recipe``: the ``learn`` recipe's real step. The fixed setting hides two things (b) is
built for: rows that finish at different lengths (the fast engine drops finished rows; (a)'s
Hugging Face decoding and TRL's ``generate`` step every row until the longest ends) and padding
((a)'s update pads every row to the batch's longest; (b)'s micro-batches trim to their own
longest). Here the model is the recipe's warm start (``warm_start(SFTConfig.for_task("kk_trace",
task_kwargs={"n_people": 2}))``, cached under ``cache/sft/``: the same architecture, 723,072
parameters, 655,360 in matmuls), the task ``kk_trace`` with 2 people, 32 prompts x 8 responses
(step ``s``: ``task.problems(32, seed=1000 + s)``, prompts of 17-22 tokens), the task's cap
``max_response_len`` = 92 and natural lengths: the model stops at its EOS. The engine runs the
recipe's config (``recipe_config("learn", ...)``: GRPO, lr 1e-4) with the contender's backend and
micro-batch, rollout path ``kv`` (float32; the recipe's ``exact`` also samples as ``kv``),
evaluation off. TRL: the settings above on the same model, prompts (checked against the engine's,
id for id) and word-level tokenizer, ``max_completion_length`` = 92, its reward the task's own
(``Task.reward`` on TRL's completion ids: 1.0 correct, 0.1 well-formed, else 0); the tokenizer's
EOS stops its generation. (b') is not run. Tokens count each contender's own responses (up to
and including EOS; the samples differ, so the counts differ by a few percent); the FLOPs of a
step (same approximation) are likewise counted from each contender's own lengths, per row.

Measured on 2026-11-24 (same machine and versions, one thread). Load average 1.2 at the start,
1.5 during the engine runs, 1.8 at the end (one other busy process on the 2 cores: a lighter
contention than the fixed table's 3.0-3.2, so compare the two tables by their ratios, not their
seconds); see ``step_recipe.json``.

===========================  ======  ========  ============  ============  ======  ======  ======
contender                    step s  tokens/s  rollout s     update s      vs (a)  vs (c)  % peak
(tokens a step)                                (tokens/s)    (tokens/s)
===========================  ======  ========  ============  ============  ======  ======  ======
(a) previous engine (12.9k)    4.99     2,580  2.39 (5,383)  2.57 (5,012)    1.00    0.84    10.8
(b) today's engine (12.6k)     2.18     5,766  0.71 (17.8k)  1.47 (8,538)    2.23    1.87    24.2
(c) TRL GRPOTrainer (12.5k)    4.05     3,081  1.87 (6,686)  2.16 (5,786)    1.19    1.00    12.9
===========================  ======  ========  ============  ============  ======  ======  ======

- Responses: mean 48.8-50.3 tokens (8 to 92). In every timed step of every contender a few rows
  (7-14 of 768 in all) reached the 92-token cap, nearly all without EOS, so (a) and TRL
  decoded 92 steps over all 256 rows (23,552 row-steps for ~12.6k tokens); (b) decodes only
  the live rows.
- Peak 166-173 GFLOP/s. A step is ~91 GFLOP ((b): rollout 18.2, update 73.0). (b): rollout 15%,
  update 29% of the peak; (a) 4.5% and 17%; TRL 5.6% and 19%.
- (b) is 2.2x (a) and 1.9x TRL (1.7x and 1.2x in the fixed table): its rollout 3.3x (a)'s and
  2.7x TRL's in tokens/s (2.1x and 1.5x at fixed lengths), its update 1.7x (a)'s and 1.5x
  TRL's (1.4x and 1.0x): TRL's micro-batches of 64 are padded to the longest completion of the
  whole generation (92), (b)'s to their own longest.

Workload ``text``: a text-sized step. A random Qwen2-style model of width 256, 6 layers (4 query
and 2 key-value heads of 64, MLP 1,024, untied LM head), a vocabulary of 8,192 rows beside a
byte-level BPE tokenizer of 8,192 ids trained on the Python standard library (10.1M parameters,
8.0M in matmuls; built once into ``cache/``), the ``kk`` task written in that tokenizer, 32
prompts x 8 responses of exactly 150 tokens (EOS never sampled, as in ``fixed``), the rest as
``fixed``. Contenders: (b), (b'') = (b) with ``update_memory="micro-batch"`` (no graph kept
across micro-batches: the loss's gradient with respect to the log-probs first, then forward and
backward one micro-batch at a time), and TRL. Each contender runs in its own fresh process,
whose peak resident set is its memory figure (``ru_maxrss``; on a GPU the allocator's peak).

Measured on 2026-11-26, Intel Xeon (2 cores, torch 2.13 CPU build, TRL 1.16, one thread), with
two GRPO runs busy on the 2 cores the whole time (load average 3.0-3.3): the matmul peak
measured under that load was 113.7 GFLOP/s (165-173 on a quiet core), so read the ratios; see
``step_text.json``.

=====================================  ======  ========  ============  ============  ======  ======  =======
contender                              step s  tokens/s  rollout s     update s      vs (c)  % peak  peak MB
=====================================  ======  ========  ============  ============  ======  ======  =======
(b) today's engine, kv                  79.89       481  29.43 (1305)  52.05 (738)     1.43    33.9   13,725
(b'') engine, micro-batch update        95.45       402  30.75 (1249)  62.84 (611)     1.19    28.4    6,039
(c) TRL GRPOTrainer                    113.96       337  41.92 (916)   72.04 (533)     1.00    23.8    4,752
=====================================  ======  ========  ============  ============  ======  ======  =======

- A step is ~3.08 TFLOP (rollout 0.66, update 2.42). (b) leads TRL by 1.43x here, less than the
  recipe's 1.9x: at width 256 the GEMMs dominate both, and its lead is in the rollout (1.42x)
  more than in the update (1.38x).
- Memory: (b) keeps the ``pi_old`` forward's graph over all 256 rows for the first update pass
  (its saving of one forward) and peaks at 2.9x TRL's memory. (b'') bounds it by one micro-batch
  (0.44x (b)'s) for 1.2x the update's time (one more forward). In a one-step check under the
  same load, (b'') with the fused LM head (``FUSED_MIN_VOCAB`` lowered to 8,192) peaked at
  4,560 MB against 5,199 MB with full logits, in the same update time (72.0 s against 73.2 s),
  and (b) at 10,909 MB against 12,491 MB (update 57.3 s against 62.1 s).
- Neither target is met here: 3x TRL and 50% of the peak.

A second run the same evening, under the same load, added the ``inverse-cdf`` sampler: (d) is
(b) and (d'') is (b'') with ``sampler="inverse-cdf"``. Its report was lost to an error in the
script's report-writing (fixed: each contender's numbers are now written as it finishes), so
only the printed step medians and memory peaks remain:

===================================  ======  ======  =======
contender                            step s  vs (c)  peak MB
===================================  ======  ======  =======
(b) today's engine, kv                86.58    1.25   13,560
(b'') engine, micro-batch update      94.23    1.14    5,810
(d) (b) with the inverse-cdf sampler  71.70    1.50   13,558
(d'') (b'') with it                   89.96    1.20    5,894
(c) TRL GRPOTrainer                  107.79    1.00    4,638
===================================  ======  ======  =======

The sampler alone, timed side by side in one process under that load (two rollouts each of the
256 x 150 tokens, alternating): 31.9-33.5 s with ``multinomial`` against 18.8-19.2 s with
``inverse-cdf``, 1.7x. (d'')'s gain over (b'') is smaller than that in this run: one timed
step each, on a loaded machine.

Workload ``qwen3``: a step on a user's shape. Qwen3-0.6B's architecture (``QWEN3_06B``: q/k
RMSNorm per head, ``head_dim`` 128 apart from width / heads, tied head) with random weights; on a
CPU scaled down (``QWEN3_CPU``: width 256, 4 layers, 4 query and 2 key-value heads of 128, MLP
768, V 8,192; 6.03M parameters, all but 3,328 in matmuls), on a GPU the 0.6B shape itself; the
same 8,192-id byte-level BPE, ``kk`` prompts, 150-token responses (EOS never sampled) and
contenders' settings as ``text``. Contenders: (b'') the engine with the micro-batch update, (d'')
the same with the inverse-CDF sampler, and TRL.

Measured on 2026-11-28, AMD EPYC (2 cores, torch 2.13 CPU build, transformers 5.24, TRL 1.16, one
thread), load average 1.0-1.1 (one core busy besides); the one-thread matmul peak of this CPU is
76.6 GFLOP/s (2048^3 float32), under half the Intel Xeon's 165-173 of the tables above, so read
the percentages against their own peak; see ``step_qwen3.json``.

=====================================  ======  ========  ============  ============  ======  ======  =======
contender                              step s  tokens/s  rollout s     update s      vs (c)  % peak  peak MB
=====================================  ======  ========  ============  ============  ======  ======  =======
(b'') engine, micro-batch update        88.78       433  26.75 (1435)  62.02 (619)     1.28    35.1    5,359
(d'') (b'') with the inverse-cdf sampler 83.36      461  19.10 (2011)  65.03 (591)     1.37    37.4    4,921
(c) TRL GRPOTrainer                    114.05       337  30.91 (1242)  83.14 (462)     1.00    27.4    4,225
=====================================  ======  ========  ============  ============  ======  ======  =======

- A step is ~2.39 TFLOP (rollout 0.51, update 1.88). The engine leads TRL by 1.28x (1.37x with
  the inverse-CDF sampler): its rollout 1.16x (1.62x), its update 1.34x. Its update reaches 40%
  of the peak, TRL's 29%; its peak memory is 1.27x TRL's (the micro-batch update keeps no graph
  across micro-batches).
- The ``fast`` engine runs Qwen3's q/k norms in its own forward (``engine/rollout/families.py``);
  before it did, this shape could sample only with the Hugging Face decoder.

Workload ``rung``: a step on a rung of the model-size ladder (``--rung``, default the top rung
``w448``: width 448, 10 layers, 14 query and 7 key-value heads of 32, MLP 896, untied head over
4,096 ids; 21.8M parameters) with random weights, ``kk`` prompts, 150-token responses and
``qwen3``'s contenders; ``step_rung_<name>.json``. Where the rungs are large the step's matrix
products dominate, and the target is an update at 50% or more of this CPU's one-thread matmul
peak. Measured on the AMD EPYC (one thread, the other core busy; 7.7 TFLOP a step;
``step_rung_w448.json``, ``docs/benchmarks.md``): the engine 173.3 s a step (update 128.5 s, 60%
of the peak) against TRL's 187.6 s (update 125.8 s, 62%): 1.08x. Met since the micro-batch
update of plain GRPO runs its first pass inside the ``pi_old`` forward (``6 N`` per token, as
TRL; before, a no-grad ``pi_old`` forward came first: 8 N, 37% of the peak, 0.81x TRL).
``--smoke`` runs it at a tiny width.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from bench_trl import LR  # noqa: E402
from tailtheory.core.io import atomic_write_json  # noqa: E402
from step_contenders import (CONTENDERS, G, OUT_RECIPE, OUT_TEXT, PEAK_N,  # noqa: E402
                             PEAK_REPEATS, PROMPTS, QWEN05_CONTENDERS, QWEN3_06B,
                             QWEN3_CONTENDERS, QWEN3_CPU, RECIPE,
                             RECIPE_CONTENDERS, RESULTS, RUNG_CONTENDERS, SMOKE, STEPS, TEXT_CONTENDERS,
                             TEXT_MAX_NEW, TEXT_SHAPE, WARMUP, Workload, cpu_model,
                             in_own_process, make_model, recipe_model, rung_shape, step_problems,
                             text_model)


def matmul_peak(device: str = "cpu") -> dict:
    """Best float32 GFLOP/s of a ``PEAK_N``-square ``torch.mm`` on the current thread count
    (on a GPU: 4x ``PEAK_N``, torch's default float32 matmul precision)."""
    n = PEAK_N * (1 if device == "cpu" else 4)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(device) for _ in range(2))
    out = torch.empty(n, n, device=device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    torch.mm(a, b, out=out)
    sync()
    best = float("inf")
    for _ in range(PEAK_REPEATS):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        best = min(best, time.perf_counter() - t0)
    return {"n": n, "best_s": best, "gflops": 2 * n**3 / best / 1e9}



def step_flops(n_matmul: int, config, w: Workload, lens: list[list[int]] | None = None) -> dict:
    """Approximate FLOPs of one step (mean over the timed steps); see the docstring. ``lens``:
    each timed step's response lengths, ``G`` rows per prompt in the prompts' order (None: every
    response ``w.max_new`` tokens, the fixed and text workloads)."""
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    width = heads * (getattr(config, "head_dim", None) or config.hidden_size // heads)
    _, steps = step_problems(WARMUP + STEPS, w)
    steps = steps[WARMUP:]
    if lens is None:
        lens = [[w.max_new] * (G * len(probs)) for probs in steps]
    steps = steps[:len(lens)]  # TRL may time fewer steps (TRL_SLOW_S)
    roll, upd = [], []
    for probs, resp in zip(steps, lens):
        n_prompt = [len(p.prompt_ids) for p in probs]
        rows = [n for n in n_prompt for _ in range(G)]
        # rollout: each distinct prompt prefilled once (causal context 1..n), then each row
        # decodes L - 1 tokens (the last sampled token is never fed) at context n + 1 .. n + L - 1
        prefill = sum(n_prompt)
        attn_pre = sum(n * (n + 1) / 2 for n in n_prompt)
        attn_dec = sum((L - 1) * n + (L - 1) * L // 2 for n, L in zip(rows, resp))
        roll.append(2 * n_matmul * (prefill + sum(L - 1 for L in resp))
                    + 4 * layers * width * (attn_pre + attn_dec))
        # update: one forward + one backward (2x) over prompt + response of every row
        total = [n + L for n, L in zip(rows, resp)]
        upd.append(6 * n_matmul * sum(total)
                   + 3 * 4 * layers * width * sum(m * (m + 1) / 2 for m in total))
    r, u = statistics.mean(roll), statistics.mean(upd)
    return {"rollout": r, "update": u, "step": r + u,
            "note": "approximation: 2N per token forward, 6N forward + backward, N = matmul "
                    "parameters; causal attention score/value products included; padding, "
                    "norms, softmax, sampler and optimiser left out"}


def profile_fast(w: Workload, rows: int = 20) -> None:
    """``torch.profiler`` tables of one (b) step after a warm-up step: the rollout
    (``engine.generate``), then the rest (``pi_old`` forward with its graph, loss, backward,
    AdamW: from ``step_record`` to the end of ``update``)."""
    from torch.profiler import ProfilerActivity, profile

    from tailtheory.engine import trainer as tr
    from tailtheory.engine.rollout.engine import RolloutEngine

    with tempfile.TemporaryDirectory() as run:
        cfg = w.config(run, 2, CONTENDERS["b_today_kv"])
        model, task = tr.load_start(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                foreach=True)
        gen = torch.Generator().manual_seed(cfg.seed)
        engine = RolloutEngine(model, tr.rollout_config(cfg, task))
        tr.train_step(0, cfg, task, model, engine, opt, gen)
        roll, upd = (profile(activities=[ProfilerActivity.CPU]) for _ in range(2))
        generate, record, update = engine.generate, tr.step_record, tr.update

        def wrap(fn, before=None, after=None):
            def call(*args, **kw):
                if before:
                    before()
                try:
                    return fn(*args, **kw)
                finally:
                    if after:
                        after()
            return call

        engine.generate = wrap(generate, roll.start, roll.stop)
        tr.step_record = wrap(record, upd.start)
        tr.update = wrap(update, after=upd.stop)
        try:
            m, _ = tr.train_step(1, cfg, task, model, engine, opt, gen)
        finally:
            tr.step_record, tr.update = record, update
    print(f"(b) step {m['time/step_s']:.2f} s under the profiler, rollout "
          f"{m['time/rollout_s']:.2f} s")
    for name, prof in (("rollout", roll), ("pi_old forward + update", upd)):
        print(f"\n{name}:")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main() -> None:
    import transformers
    import trl

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("fixed", "recipe", "text", "qwen05", "qwen3",
                                               "rung"),
                        default="fixed",
                        help="fixed: a random model, every response 100 tokens (step.json); "
                             f"recipe: the {RECIPE!r} recipe's warm start and task, natural "
                             "lengths (step_recipe.json); text: a random Qwen2-style model of "
                             "width 256, 6 layers, 8,192 BPE ids, every response 150 tokens "
                             "(step_text.json); qwen05: Qwen2.5-0.5B's shape, random, 150 "
                             "tokens (a GPU only); qwen3: Qwen3-0.6B's shape on a GPU, scaled "
                             "down on a CPU (QWEN3_CPU), random, 150 tokens (step_qwen3.json); "
                             "rung: a rung of the model-size ladder (--rung), random, 150 tokens "
                             "(step_rung_<name>.json)")
    parser.add_argument("--rung", default="w448",
                        help="--workload rung: which rung's shape (default w448, the top)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                        help="where every contender runs (default cpu, one thread); a GPU's "
                             "report is named after it")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny run of the whole script (see SMOKE); writes nothing here")
    parser.add_argument("--contenders", default=None,
                        help="comma-separated contenders of CONTENDERS, TRL's (c_trl) among "
                             "them: the ratios are against it (default: the workload's own)")
    parser.add_argument("--profile", action="store_true",
                        help="print a torch.profiler table of one (b) step instead")
    args = parser.parse_args()
    if args.smoke and args.workload == "recipe":
        raise SystemExit("--smoke runs the fixed, text and qwen05 workloads (the recipe's step "
                         "is the recipe's size)")
    if args.smoke and not SMOKE:  # again, in a process whose constants (and children's) are tiny
        import subprocess
        import sys

        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "BENCH_STEP_SMOKE": "1", "BENCH_STEP_SMOKE_DIR": d}
            raise SystemExit(subprocess.call([sys.executable, *sys.argv], env=env))
    from tailtheory.engine.devices import resolve_device

    device = resolve_device(args.device)
    if args.workload == "qwen05" and device == "cpu":
        raise SystemExit("--workload qwen05 needs a GPU (--device cuda): a 0.5B float32 GRPO "
                         "step at 256 x 150 tokens takes tens of minutes on a CPU")
    if device == "cpu":
        torch.set_num_threads(1)
    load = {"start": os.getloadavg()}
    peak = {"start": matmul_peak(device)} if not args.profile else {}
    results = {}
    with tempfile.TemporaryDirectory() as d:
        if args.workload == "fixed":
            model_dir, n_params, n_matmul = make_model(Path(d) / "tiny")
            w = Workload("fixed", model_dir, "kk")
        elif args.workload in ("text", "qwen05", "qwen3", "rung"):
            from bench_any_model import QWEN25_05B

            shape, family, out, contenders = {
                "text": (TEXT_SHAPE, "qwen2", OUT_TEXT, TEXT_CONTENDERS),
                "qwen05": (QWEN25_05B, "qwen2", RESULTS / "step_qwen05.json", QWEN05_CONTENDERS),
                "qwen3": (QWEN3_CPU if device == "cpu" else QWEN3_06B, "qwen3",
                          RESULTS / "step_qwen3.json", QWEN3_CONTENDERS),
                "rung": (rung_shape(args.rung), "qwen2", RESULTS / f"step_rung_{args.rung}.json",
                         RUNG_CONTENDERS)}[args.workload]
            if SMOKE and args.workload in ("qwen3", "rung"):
                shape = dict(shape, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             **({"num_attention_heads": 2, "num_key_value_heads": 1}
                                if args.workload == "rung" else {}))
            model_dir, n_params, n_matmul = text_model(shape=shape, family=family)
            w = Workload(args.workload, model_dir, "kk", max_new=TEXT_MAX_NEW, out=out,
                         contenders=contenders, own_tokenizer=True)
        else:
            model_dir, n_params, n_matmul, kwargs = recipe_model()
            w = Workload("recipe", model_dir, "kk_trace", kwargs, contenders=RECIPE_CONTENDERS,
                         out=OUT_RECIPE)
            w = replace(w, max_new=w.get_task().max_response_len)
        if args.contenders:
            names = tuple(args.contenders.split(","))
            wrong = [n for n in names if n not in CONTENDERS]
            if wrong or "c_trl" not in names:
                raise SystemExit(f"--contenders: {wrong or 'c_trl missing'}; known: "
                                 f"{', '.join(CONTENDERS)} (the {w.name} workload's own: "
                                 f"{', '.join(w.contenders)}), c_trl among them")
            w = replace(w, contenders=names)
        if device != "cpu":
            gpu = torch.cuda.get_device_name().replace(" ", "_")
            w = replace(w, device=device, out=w.out.with_name(f"{w.out.stem}_{gpu}.json"))
        if args.profile:
            profile_fast(w)
            return
        config = transformers.AutoConfig.from_pretrained(model_dir)
        for name in w.contenders:
            c = CONTENDERS[name]
            t0 = time.perf_counter()
            results[name] = in_own_process(w, name)
            results[name]["label"] = c["label"]
            atomic_write_json(w.out.with_suffix(".partial.json"), results)  # kept on a crash
            load[name] = os.getloadavg()
            print(f"{c['label']}: step {results[name]['step_s_median']:.2f} s "
                  f"({time.perf_counter() - t0:.0f} s in all), {results[name]['len_mean']:.1f} "
                  f"tokens a response, peak memory "
                  f"{results[name].get('peak_gpu_mb', results[name]['peak_rss_mb']):.0f} MB, load "
                  f"{load[name][0]:.2f}", flush=True)
    peak["end"] = matmul_peak(device)
    load["end"] = os.getloadavg()
    best = max(peak["start"]["gflops"], peak["end"]["gflops"])
    engine = next((n for n in results if n != "c_trl"), "c_trl")  # whose FLOPs the print names
    if w.name != "recipe":  # the same work for every contender: every response w.max_new tokens
        flops = step_flops(n_matmul, config, w)
        per = {name: flops for name in results}
    else:  # each contender's own lengths: the work its samples need
        per = {name: step_flops(n_matmul, config, w, r["_lens"]) for name, r in results.items()}
        flops = {name: {k: v for k, v in f.items() if k != "note"} for name, f in per.items()}
        flops["note"] = per[engine]["note"] + "; from each contender's own response lengths"
    a = results["a_prev_kv"]["tokens_per_s"] if "a_prev_kv" in results else None
    c = results["c_trl"]["tokens_per_s"]
    for name, r in results.items():
        r.pop("_lens")
        f = per[name]
        r["vs_a"] = None if a is None else r["tokens_per_s"] / a
        r["vs_c"] = r["tokens_per_s"] / c
        r["gflops"] = f["step"] / r["step_s_median"] / 1e9
        r["peak_fraction"] = r["gflops"] / best
        r["rollout_peak_fraction"] = f["rollout"] / r["rollout_s_median"] / 1e9 / best
        r["update_peak_fraction"] = f["update"] / r["update_s_median"] / 1e9 / best
    if w.name != "recipe":
        setup = {"prompts": PROMPTS, "group_size": G, "responses": PROMPTS * G,
                 "max_new_tokens": w.max_new, "eos": "never sampled (model weights)",
                 "params": n_params, "matmul_params": n_matmul, "vocab": config.vocab_size,
                 "warmup_steps": WARMUP, "timed_steps": STEPS, "lr": LR, "task": w.task,
                 **({"shape": {k: getattr(config, k, None) for k in (*TEXT_SHAPE, "head_dim")},
                     "model_type": config.model_type,
                     "tokenizer": "byte-level BPE, 8,192 ids, trained on the Python standard "
                     "library"} if w.name != "fixed" else {})}
    else:
        cfg = w.config("unused", WARMUP + STEPS, CONTENDERS["b_today_kv"])
        setup = {"recipe": RECIPE, "task": w.task, "task_kwargs": w.task_kwargs,
                 "model": str(model_dir), "prompts": PROMPTS, "group_size": G,
                 "responses": PROMPTS * G, "max_new_tokens": w.max_new,
                 "eos": "the model's own (natural lengths)", "params": n_params,
                 "matmul_params": n_matmul, "vocab": config.vocab_size, "warmup_steps": WARMUP,
                 "timed_steps": STEPS, "lr": cfg.lr, "method": cfg.method,
                 "engine_rollout": "kv", "trl_reward": "the task's reward (Task.reward) on "
                 "TRL's completion ids: 1.0 correct, 0.1 well-formed, else 0"}
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "workload": w.name,
        "machine": {"platform": platform.platform(), "machine": platform.machine(),
                    "processor": platform.processor(), "cpu_model": cpu_model(),
                    "cpu_count": os.cpu_count(), "device": w.device,
                    "gpu": None if w.device == "cpu" else torch.cuda.get_device_name(),
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "trl": trl.__version__, "threads": torch.get_num_threads(),
                    "loadavg_1_5_15": load},
        "setup": setup,
        "peak": {**peak, "gflops": best},
        "flops_per_step": flops,
        "contenders": results,
    }
    atomic_write_json(w.out, report)
    w.out.with_suffix(".partial.json").unlink(missing_ok=True)
    fl = per[engine]
    where = (f"{cpu_model()}: matmul peak (1 thread, {PEAK_N}^3 float32)" if w.device == "cpu"
             else f"{torch.cuda.get_device_name()}: matmul peak ({peak['end']['n']}^3 float32)")
    print(f"\n{where} {best:.1f} GFLOP/s; step FLOPs "
          f"{fl['step'] / 1e9:.1f} G (rollout {fl['rollout'] / 1e9:.1f} G, update "
          f"{fl['update'] / 1e9:.1f} G{'' if w.name == 'fixed' else ', of (b)'}); load average "
          f"start {load['start'][0]:.2f}, end {load['end'][0]:.2f}")
    head = (f"{'contender':28s} {'step s':>7s} {'tok/s':>7s} {'roll s':>7s} {'roll t/s':>8s} "
            f"{'upd s':>7s} {'upd t/s':>8s} {'vs (a)':>6s} {'vs (c)':>6s} {'% peak':>6s} "
            f"{'tokens':>7s} {'peak MB':>7s}")
    print(head)
    for r in results.values():
        print(f"{r['label']:28s} {r['step_s_median']:7.2f} {r['tokens_per_s']:7.0f} "
              f"{r['rollout_s_median']:7.2f} {r['rollout_tokens_per_s']:8.0f} "
              f"{r['update_s_median']:7.2f} {r['update_tokens_per_s']:8.0f} "
              f"{'-' if r['vs_a'] is None else format(r['vs_a'], '.2f'):>6s} "
              f"{r['vs_c']:6.2f} {100 * r['peak_fraction']:6.1f} {r['tokens_per_step']:7.0f} "
              f"{r.get('peak_gpu_mb', r['peak_rss_mb']):7.0f}")
    print(f"wrote {w.out}")


if __name__ == "__main__":
    main()
