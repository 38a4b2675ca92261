"""A user's model at Qwen2.5-0.5B's size: each probe at 8 x 512 positions and a few GRPO steps.

What it measures, on ``--device auto`` (a GPU when one is visible):

- the model: Qwen2.5-0.5B's configuration (hidden 896, 24 layers, 14 query and 2 key-value
  heads, MLP 4,864, tied embeddings, V = 151,936 rows), random weights in float32 (no weights
  can be downloaded), saved with ``save_pretrained`` beside a byte-level BPE tokenizer of
  ``--tokenizer-vocab`` ids trained here on the Python standard library's source (the corpus
  LM's tokenizer recipe, ``tailtheory.engine.start.corpus_lm.train_tokenizer``);
- each probe command (``tailtheory probe mismatch|pruning|gradient``) at ``--batch`` x
  ``--length`` positions: wall time and peak memory (the GPU's allocator peak; on a CPU the
  process's peak resident set, which only grows, so each probe runs in its own process);
- ``tailtheory train --model PATH --task kk`` for ``--steps`` GRPO steps (float32, AdamW):
  seconds a step and response tokens a second from its own metrics, and the peak memory.

Results go to ``benchmarks/results/any_model_<device>.json`` with the device, the CPU, torch's
version and the exact commands. ``--shape small`` swaps in a two-layer, width-64 model of the
same vocabulary; ``--shape auto`` (the default, what ``make bench`` runs) takes Qwen2.5-0.5B's
shape on a GPU and the small one on a CPU, where a 0.5B float32 GRPO step takes minutes.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_any_model.py [--shape full]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, vocab_size=151_936,
                  max_position_embeddings=32_768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, hidden_act="silu")
"""Qwen2.5-0.5B's ``config.json`` fields that decide its shape and cost (its model card)."""

SMALL = dict(QWEN25_05B, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=2, num_key_value_heads=1)
"""Two narrow layers at the same vocabulary: the script's own check on a CPU."""

PROBES = ("mismatch", "pruning", "gradient")


def build_checkpoint(path: Path, shape: dict, tokenizer_vocab: int, family: str = "qwen2") -> dict:
    """Save a random ``family`` (``qwen2`` or ``qwen3``) model of ``shape`` and a BPE tokenizer
    to ``path``; its facts."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    from tailtheory.engine.start.corpus_lm import CorpusLMConfig, corpus_files, train_tokenizer

    t0 = time.perf_counter()
    files, _ = corpus_files(CorpusLMConfig(corpus_bytes=2_000_000))
    tok = train_tokenizer([f.read_text(encoding="utf-8") for f in files], tokenizer_vocab)
    torch.manual_seed(0)
    cfg = {"qwen2": Qwen2Config, "qwen3": Qwen3Config}[family](**shape, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return {"params": sum(p.numel() for p in model.parameters()), "vocab_rows": shape["vocab_size"],
            "tokenizer_ids": len(tok), "build_s": round(time.perf_counter() - t0, 1)}


CHILD = r"""
import json, resource, sys, time
import torch
from tailtheory.cli import main
argv = json.loads(sys.argv[1])
cuda = torch.cuda.is_available() and "cpu" not in argv
if cuda:
    torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
rc = main(argv)
out = {"rc": rc, "seconds": time.perf_counter() - t0,
       "peak_cpu_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if cuda:
    out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
print("RESULT " + json.dumps(out))
"""


def run_command(argv: list[str]) -> dict:
    """``tailtheory ARGV`` in a fresh process: exit code, seconds, peak memory, output tail."""
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv)], capture_output=True,
                          text=True, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    res = json.loads(lines[-1][7:]) if lines else {"rc": proc.returncode}
    res["command"] = "tailtheory " + " ".join(argv)
    if res.get("rc") != 0:
        res["stderr_tail"] = proc.stderr[-1500:]
    return res


def grpo_numbers(run: Path) -> dict:
    """Median seconds a step and response tokens a second from a run's ``metrics.jsonl``."""
    import statistics

    lines = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    timed = lines[1:] or lines  # the first step pays for warm-up
    step = statistics.median(m["time/step_s"] for m in timed)
    tokens = statistics.median(m["rollout/tokens"] for m in timed)
    return {"steps": len(lines), "step_s": step, "response_tokens_per_step": tokens,
            "tokens_per_s": tokens / step, "reward_mean": [m["reward/mean"] for m in lines],
            "loss_finite": all(m["loss/policy"] == m["loss/policy"] for m in lines)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8, help="prompts a GRPO step (x 8 responses)")
    p.add_argument("--tokenizer-vocab", type=int, default=8192)
    p.add_argument("--shape", choices=("auto", "small", "full"), default="auto",
                   help="full: Qwen2.5-0.5B's; small: two narrow layers; auto: full on a GPU")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = p.parse_args(argv)

    import torch

    from tailtheory.core.provenance import cpu_model
    from tailtheory.engine.devices import resolve_device

    device = resolve_device(args.device)
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    small = args.shape == "small" or (args.shape == "auto" and gpu is None)
    report = {"device": gpu or "cpu", "cpu": cpu_model(), "torch": torch.__version__,
              "python": platform.python_version(), "shape": "small" if small else
              "Qwen2.5-0.5B", "positions": [args.batch, args.length]}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "model"
        report["model"] = build_checkpoint(ckpt, SMALL if small else QWEN25_05B,
                                           args.tokenizer_vocab)
        print(f"model: {report['model']}", flush=True)
        report["probes"] = {}
        for name in PROBES:
            res = run_command(["probe", name, "--model", str(ckpt), "--device", device,
                               "--batch", str(args.batch), "--length", str(args.length),
                               "--out", str(Path(tmp) / f"probe_{name}")])
            report["probes"][name] = res
            print(f"probe {name}: {res}", flush=True)
        run = Path(tmp) / "grpo"
        res = run_command(["train", "--model", str(ckpt), "--task", "kk", "--steps",
                           str(args.steps), "--device", device, "--prompts-per-step",
                           str(args.prompts), "--group-size", "8", "--eval-every", "0",
                           "--out", str(run)])
        if res.get("rc") == 0:
            res.update(grpo_numbers(run))
        report["grpo"] = res
        print(f"grpo: {res}", flush=True)
    tag = "cpu" if gpu is None else gpu.replace(" ", "_")
    out = Path(args.out) if args.out else RESULTS / f"any_model_{'small_' if small else ''}{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    ok = all(r.get("rc") == 0 for r in [*report["probes"].values(), report["grpo"]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
