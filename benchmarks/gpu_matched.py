"""The ``matched`` recipe at a larger size, on a GPU: one prepared run of a few minutes.

The CPU evidence of the papers' regime is the ``matched`` recipe (a corpus LM of width 128 and 4
layers, 1.6M parameters, warm-started on ``kk_prose``). This script builds the same recipe one
size up and trains it on a GPU, so a reader sees whether the regime (LOPTI's probability bins of
sampled tokens, arXiv 2505.12929 Fig. 1(a)) and the learning survive a larger model:

1. the corpus LM (:mod:`tailtheory.engine.start.corpus_lm`) at width :data:`WIDTH`, :data:`LAYERS`
   layers, the same 4,096-id BPE, :data:`PRETRAIN_STEPS` AdamW steps of :data:`PRETRAIN_BATCH`
   windows (cached);
2. its ``kk_prose`` warm start (:mod:`tailtheory.engine.start.sft`, the same accuracy window; cached);
3. GRPO of the ``matched`` recipe from that warm start (``--model PATH``), :data:`STEPS` steps
   per seed with the held-out accuracy every :data:`EVAL_EVERY` steps;
4. LOPTI's four bins of ``pi_old`` over the sampled response tokens of :data:`BIN_BATCHES`
   batches per seed, at the warm start and at each run's last policy, at temperature 1 (the
   recipe's).

Every phase's numbers are written to the report as soon as it ends, so a run stopped by its time
limit keeps what it finished. Report: ``benchmarks/results/matched_<GPU>.json`` (``--out``).

    python benchmarks/gpu_matched.py --device cuda            # ~3 min on an H100
    python benchmarks/gpu_matched.py --smoke                  # the whole script in ~1 min (CPU)

Measured on an H100 (``results/matched_NVIDIA_H100_80GB_HBM3.json``): corpus LM 49 s (5.6M
parameters, held-out perplexity 3.0), warm start 53 s (750 steps, accuracy 0.36), GRPO 22-28 s a
seed (0.6-0.9 s a step); the held-out accuracy is evaluated at steps 0, 10 and 20.

No result of the toolkit depends on this script: it is the larger-size check a GPU allows.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

WIDTH, LAYERS, HEADS, KV_HEADS = 256, 6, 4, 2
"""The larger corpus LM: 4 query and 2 key-value heads of 64 (the CPU recipe's is 128 x 4)."""
PRETRAIN_STEPS, PRETRAIN_BATCH = 1500, 32
"""About 6M tokens of 128-token windows: ~6 passes over the ~1M training tokens."""
STEPS, EVAL_EVERY, SEEDS = 30, 10, (1, 2, 3)
"""GRPO steps per seed (a quarter of the recipe's 120), held-out evaluations, seeds."""
BIN_BATCHES = 2
"""Rollout batches (32 prompts x 8 responses) per seed and policy for the bin fractions."""
PAPER_BINS = (0.192, 0.102, 0.101, 0.605)
"""LOPTI Fig. 1(a), Qwen2.5-7B on K&K: sampled tokens per pi_old bin [0,.25], (.25,.5], (.5,.75],
(.75,1] (as in :mod:`tailtheory.regime.quantities`)."""


def sizes(smoke: bool) -> dict:
    """The run's sizes (``smoke``: a tiny model and a few steps, to check the script runs)."""
    if smoke:
        return dict(width=64, layers=2, heads=2, kv_heads=1, corpus_bytes=300_000,
                    pretrain_steps=20, pretrain_batch=4, sft_steps=20, steps=2, eval_every=1,
                    seeds=(1,), bin_batches=1, prompts=2, group=4, eval_n=8)
    return dict(width=WIDTH, layers=LAYERS, heads=HEADS, kv_heads=KV_HEADS,
                corpus_bytes=4_000_000, pretrain_steps=PRETRAIN_STEPS,
                pretrain_batch=PRETRAIN_BATCH, sft_steps=3000, steps=STEPS, eval_every=EVAL_EVERY,
                seeds=SEEDS, bin_batches=BIN_BATCHES, prompts=32, group=8, eval_n=256)


def corpus_config(s: dict):
    from tailtheory.core.models import TinyLMConfig
    from tailtheory.engine.start.corpus_lm import CORPUS_VOCAB, CorpusLMConfig

    model = TinyLMConfig(vocab_size=CORPUS_VOCAB, hidden=s["width"], layers=s["layers"],
                         heads=s["heads"], kv_heads=s["kv_heads"])
    return CorpusLMConfig(corpus_bytes=s["corpus_bytes"], model=model,
                          steps=s["pretrain_steps"], batch_size=s["pretrain_batch"],
                          eval_every=max(1, s["pretrain_steps"] // 5),
                          eval_windows=8 if s["corpus_bytes"] < 1_000_000 else 64)


def sft_config(s: dict, pre, smoke: bool):
    from tailtheory.engine.start.sft import SFTConfig

    extra = dict(max_steps=s["sft_steps"], eval_n=s["eval_n"], stop_in_window=False,
                 eval_every=10) if smoke else {}
    return SFTConfig.for_task("kk_prose", task_kwargs={"n_people": 2}, pretrained=pre,
                              model=pre.model, **extra)


def train_config(s: dict, warm: Path, seed: int, device: str, out: Path):
    from tailtheory.experiments.recipes import recipe_config

    return recipe_config("matched", model=str(warm), seed=seed, steps=s["steps"],
                         eval_every=s["eval_every"], eval_n=s["eval_n"], device=device,
                         prompts_per_step=s["prompts"], group_size=s["group"],
                         checkpoint_every=s["steps"], out=str(out / f"seed{seed}"))


@torch.no_grad()
def bin_counts(model, task, cfg, batches: int) -> list[int]:
    """Sampled response tokens per LOPTI bin of ``pi_old`` over ``batches`` of the trainer's own
    rollout batches of ``cfg`` (steps ``0 .. batches-1`` of its seed), on the model's device."""
    from tailtheory.engine.rollout.engine import RolloutEngine
    from tailtheory.engine.trainer import rollout_config
    from tailtheory.regime.measure import bin_sums, rollout_batch

    model = model.float().eval()
    device = next(model.parameters()).device
    engine = RolloutEngine(model, rollout_config(cfg, task))
    gen = torch.Generator(device).manual_seed(cfg.seed)
    total = [0, 0, 0, 0]
    for i in range(batches):
        _, rec = rollout_batch(model, task, cfg, engine, gen, i)
        adv = torch.zeros_like(rec.b.old_logp)
        counts, _ = bin_sums(rec.b.old_logp.exp(), adv, rec.b.mask)
        total = [a + b for a, b in zip(total, counts)]
    return total


def fractions(counts: list[int]) -> list[float]:
    n = sum(counts)
    return [c / n for c in counts] if n else [float("nan")] * len(counts)


def final_policy(cfg, run: Path):
    """The run's last policy: its starting model with the last checkpoint's weights."""
    from tailtheory.engine.checkpoint import read_checkpoint
    from tailtheory.engine.load import load_start

    model, task = load_start(cfg)
    model.load_state_dict(read_checkpoint(run / "checkpoint.pt")["model"])
    return model, task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes and a temporary cache: checks the script, no evidence")
    parser.add_argument("--steps", type=int, default=STEPS,
                        help=f"GRPO steps per seed (default {STEPS}; the recipe's 120 take about "
                             f"100 s a seed on an H100)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--out", type=Path, default=None,
                        help="the report (default benchmarks/results/matched_<device>.json)")
    args = parser.parse_args()
    if args.smoke:
        os.environ.setdefault("TAILTHEORY_CACHE", tempfile.mkdtemp(prefix="gpu_matched_"))
    from tailtheory.core.provenance import cpu_model
    from tailtheory.core.models import num_params
    from tailtheory.engine.checkpoint import read_metrics
    from tailtheory.engine.start.corpus_lm import corpus_lm, read_corpus_record
    from tailtheory.engine.devices import resolve_device
    from tailtheory.engine.load import load_start
    from tailtheory.engine.trainer import train
    from tailtheory.engine.start.warm_cache import warm_start

    device = resolve_device(args.device)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    out = args.out or (Path(__file__).parent / "results" /
                       f"matched_{name.replace(' ', '_')}.json")
    if args.smoke and args.out is None:
        out = Path(os.environ["TAILTHEORY_CACHE"]) / "matched.json"
    s = sizes(args.smoke)
    if not args.smoke:
        if args.steps < 1 or not args.seeds:
            raise SystemExit("--steps must be >= 1 and --seeds name at least one seed")
        s.update(steps=args.steps, seeds=tuple(args.seeds))
    report = {"device": name, "cpu": cpu_model(), "torch": torch.__version__,
              "smoke": args.smoke, "sizes": {k: list(v) if isinstance(v, tuple) else v
                                              for k, v in s.items()},
              "paper_bins": list(PAPER_BINS), "command": "python benchmarks/gpu_matched.py "
              + ("--smoke" if args.smoke else f"--device {args.device} --steps {s['steps']} "
                 f"--seeds {' '.join(map(str, s['seeds']))}")}

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] saved {out}", flush=True)

    t = time.perf_counter()
    pre = corpus_config(s)
    folder = corpus_lm(pre, progress=False)
    rec = read_corpus_record(folder)
    report["corpus_lm"] = {"seconds": time.perf_counter() - t, "params": rec.get("n_params"),
                           "heldout_ppl": rec.get("heldout_ppl"),
                           "unigram_loss": rec.get("unigram_loss"),
                           "heldout_loss": rec.get("heldout_loss")}
    save()
    t = time.perf_counter()
    scfg = sft_config(s, pre, args.smoke)
    warm = warm_start(scfg, progress=False)
    sft = json.loads((warm / "sft.json").read_text())
    report["warm_start"] = {"seconds": time.perf_counter() - t, "steps": sft.get("steps"),
                            "accuracy": sft.get("accuracy"), "folder_hash": warm.name}
    save()
    runs = Path(tempfile.mkdtemp(prefix="matched_runs_"))
    report["runs"], report["bins"] = {}, {"warm": {}, "last": {}}
    for seed in s["seeds"]:
        cfg = train_config(s, warm, seed, device, runs)
        t = time.perf_counter()
        model, task = load_start(cfg)
        report["bins"]["warm"][seed] = bin_counts(model.to(device), task, cfg, s["bin_batches"])
        report["params"] = num_params(model)
        bins_s = time.perf_counter() - t
        t = time.perf_counter()
        run = train(cfg, progress=False)
        m = read_metrics(run)
        train_s = time.perf_counter() - t
        evals = [(r["step"], r["eval/accuracy"]) for r in m if r.get("eval/accuracy") is not None]
        report["runs"][seed] = {"reward": [r["reward/mean"] for r in m], "eval": evals,
                                "len_mean": [r["rollout/len_mean"] for r in m],
                                "step_s": [r["time/step_s"] for r in m],
                                "train_seconds": train_s, "bins_seconds": bins_s}
        save()
        model, task = final_policy(cfg, run)
        report["bins"]["last"][seed] = bin_counts(model.to(device), task, cfg, s["bin_batches"])
        save()
    for policy in ("warm", "last"):
        pooled = [sum(c[b] for c in report["bins"][policy].values()) for b in range(4)]
        report["bins"][f"{policy}_fractions"] = fractions(pooled)
    gains = {seed: r["eval"][-1][1] - r["eval"][0][1] for seed, r in report["runs"].items()
             if len(r["eval"]) > 1}
    report["heldout_gain"] = gains
    save()
    print(json.dumps({k: report[k] for k in ("corpus_lm", "warm_start", "heldout_gain")},
                     indent=1))
    print("bins warm", [f"{x:.3f}" for x in report["bins"]["warm_fractions"]],
          "last", [f"{x:.3f}" for x in report["bins"]["last_fractions"]],
          "paper", PAPER_BINS)


if __name__ == "__main__":
    main()
