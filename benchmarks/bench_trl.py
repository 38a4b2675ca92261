"""One GRPO step in this engine and in TRL's ``GRPOTrainer``, side by side: tokens per second.

Same tiny Qwen2-style model (hidden 128, 4 layers, V = 512, ~1M parameters; both load it from
one saved folder), same word-level tokenizer, same batch (2 prompts x 8 generations), same
response cap (32 new tokens; a random model rarely stops early), same loss family (clipped,
token-mean, no KL term), AdamW, temperature 1, CPU, float32 training. A step is generation +
loss + backward + optimizer step. Differences that remain, and are reported: this engine's
``pi_old`` forward (with its mismatch statistics) is also the update's forward, so both do one
training forward per step, as TRL does at ``num_iterations = 1``; this engine samples with its
own KV-cache loop (path ``kv``: float32, like TRL's ``generate``; ``bf16`` also timed) and runs
eager attention (its models must compute what they saved), TRL the loader's default ``sdpa``;
TRL's gradient checkpointing is switched off to match.

Run offline: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_trl.py`` (needs the ``bench``
extra: ``pip install -e '.[bench]'``) -> ``benchmarks/results/trl.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from tailtheory.core.io import atomic_write_json  # noqa: E402

PROMPTS, G, MAX_NEW = 2, 8, 32
"""Prompts per step, generations per prompt, response cap (CALIBRATION.md's TRL setting)."""
WARMUP, STEPS = 2, 10
"""Steps run before timing, and steps timed (median reported)."""
LR = 1e-4
OUT = Path(__file__).resolve().parent / "results" / "trl.json"


def save_model(folder: Path) -> Path:
    from tailtheory.core.models import num_params, tiny_lm

    from tailtheory.engine.tasks.task import get_task

    model = tiny_lm(vocab_size=512, hidden=128, layers=4, heads=4, kv_heads=2, seed=0)
    model.save_pretrained(folder)
    get_task("kk", seed=0).tokenizer.save_pretrained(folder)  # the task speaks the model's own
    return folder, num_params(model)


def bench_engine(model_dir: Path, rollout: str) -> dict:
    """This engine's trainer, ``WARMUP + STEPS`` steps; timings from its metrics lines."""
    from tailtheory.engine.config import TrainConfig
    from tailtheory.engine.checkpoint import read_metrics
    from tailtheory.engine.trainer import train

    with tempfile.TemporaryDirectory() as run:
        cfg = TrainConfig(task="kk", model=str(model_dir), method="grpo", rollout=rollout,
                          steps=WARMUP + STEPS, prompts_per_step=PROMPTS, group_size=G,
                          max_new_tokens=MAX_NEW, lr=LR, out=run, checkpoint_every=10**6)
        train(cfg, progress=False)
        lines = read_metrics(run)[WARMUP:]
    step_s = [m["time/step_s"] for m in lines]
    tokens = [m["rollout/tokens"] for m in lines]
    return _summary(step_s, tokens, rollout_s=[m["time/rollout_s"] for m in lines])


def step_clock(stop_after: int | None = None, slow_s: float | None = None):
    """A ``TrainerCallback`` whose ``t`` lists the seconds of every optimiser step
    (``on_step_begin`` -> ``on_step_end``); with ``stop_after`` and ``slow_s``, training stops
    once step ``stop_after`` took longer than ``slow_s``."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.t: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self._t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.t.append(time.perf_counter() - self._t0)
            if stop_after is not None and len(self.t) == stop_after and self.t[-1] > slow_s:
                control.should_training_stop = True

    return Clock()


def bench_trl(model_dir: Path) -> dict:
    """TRL's ``GRPOTrainer`` on the same model, tokenizer, prompts and shapes."""
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from tailtheory.engine.tasks.task import get_task

    task = get_task("kk", seed=0)
    problems = task.problems(PROMPTS * (WARMUP + STEPS), seed=1000)
    data = Dataset.from_dict({"prompt": [task.decode(p.prompt_ids) for p in problems],
                              "answer": [p.answer for p in problems]})

    def reward(completions, answer, **_):
        return [float(c.split("<eos>")[0].strip() == a) for c, a in zip(completions, answer)]

    clock = step_clock()
    with tempfile.TemporaryDirectory() as out:
        cfg = trl.GRPOConfig(output_dir=out, per_device_train_batch_size=PROMPTS * G,
                             num_generations=G, max_completion_length=MAX_NEW,
                             max_steps=WARMUP + STEPS, learning_rate=LR, beta=0.0,
                             loss_type="dapo", epsilon=0.2, epsilon_high=0.24, temperature=1.0,
                             use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                             gradient_checkpointing=False, disable_tqdm=True, seed=0,
                             bf16=False, dataloader_num_workers=0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data,
                                  processing_class=task.tokenizer, callbacks=[clock])
        trainer.train()
        logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    tokens = [h["completions/mean_length"] * PROMPTS * G for h in logs][WARMUP:]
    return {**_summary(clock.t[WARMUP:], tokens), "trl_version": trl.__version__}


def _summary(step_s: list[float], tokens: list[float], rollout_s=None) -> dict:
    med = statistics.median(step_s)
    out = {"step_s_median": med, "step_s": step_s, "tokens_per_step": statistics.mean(tokens),
           "tokens_per_s": statistics.mean(tokens) / med}
    if rollout_s:
        out["rollout_s_median"] = statistics.median(rollout_s)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        model_dir, n_params = save_model(Path(d) / "tiny")
        results = {"trl": bench_trl(model_dir)}
        for path in ("kv", "bf16"):
            results[f"engine_{path}"] = bench_engine(model_dir, path)
    report = {
        "setup": {"prompts": PROMPTS, "group_size": G, "max_new_tokens": MAX_NEW,
                  "params": n_params, "vocab": 512, "warmup_steps": WARMUP, "timed_steps": STEPS,
                  "torch": torch.__version__, "threads": torch.get_num_threads(),
                  "machine": platform.machine(), "cpu_count": os.cpu_count()},
        **results,
        "ratio_tokens_per_s": {f"engine_{p}/trl": results[f"engine_{p}"]["tokens_per_s"]
                               / results["trl"]["tokens_per_s"] for p in ("kv", "bf16")},
    }
    atomic_write_json(OUT, report)
    for name in ("trl", "engine_kv", "engine_bf16"):
        r = results[name]
        print(f"{name:12s} step {r['step_s_median']:.3f} s  tokens/step {r['tokens_per_step']:.0f}"
              f"  tokens/s {r['tokens_per_s']:.0f}")
    print("ratio (engine / trl tokens/s):", json.dumps(report["ratio_tokens_per_s"]))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
