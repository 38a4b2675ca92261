"""The trainer's pass compiled with ``torch.compile`` against eager: what compiling would buy.

What is timed: the forward and backward of one micro-batch of the trainer's pass
(:func:`tailtheory.core.forward.full_forward` with the LM head on the response positions only,
then the mean of the response log-probs, backward), float32, one thread, at two shapes:

- ``recipe``: the ``learn`` recipe's warm-start shape (``SFTConfig().model``: hidden 128,
  4 layers, V = 512), 64 rows of 140 positions, 40 of them prompt;
- ``text``: ``bench_step.py``'s text-sized shape (hidden 256, 6 layers, V = 8,192), 64 rows of
  175 positions, 25 of them prompt.

Random weights (the speed does not depend on them), left padding on half the rows. Eager and
compiled alternate in one process, best of ``REPEATS`` each, so a load on the other core hits
both alike. Compiled means ``torch.compile(model, dynamic=True)``: the trainer trims each
micro-batch to its own longest row, so a graph per length would recompile all run long.

Compile time, measured in two processes over one inductor cache folder (a temporary one):
``cold`` is the first compiled call of the first process (tracing, code generation, the C++
compiler), ``warm`` the first compiled call of the second, which reads the first's cache: the
cost every training process would pay once.

Measured on this CPU (Intel Xeon, 2 cores, torch 2.13, 2026-11-27, under load 2;
``results/compile.json``): 1.33x at both shapes (recipe 0.521 s against 0.691 s, text 6.10 s
against 8.12 s), after 69 s / 80 s of compiling cold and 16 s / 37 s warm. A compiled rollout
decode (the inference engine's ``forward``, the same options) ran 10x *slower* than eager: the
cache column and the largest position change at every token, and each change recompiles.

Run: ``python benchmarks/bench_compile.py`` (``--shapes recipe`` for one; ``--repeats``).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "compile.json"
REPEATS = 5
ROWS = 64
SHAPES = {"recipe": {"positions": 140, "prompt": 40},
          "text": {"positions": 175, "prompt": 25}}
"""Micro-batch of each shape: positions per row (prompt + response) and the prompt's share."""


def build(shape: str):
    """The random-weight model of ``shape``, in float32."""
    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.start.sft import SFTConfig

    if shape == "recipe":
        return tiny_lm(SFTConfig().model, seed=0)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from step_contenders import TEXT_SHAPE
    import torch

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(**TEXT_SHAPE, attn_implementation="eager"))


def flops(model, positions: int, prompt: int) -> float:
    """Approximate FLOPs of one micro-batch's forward + backward: 6 per weight of a block per
    position, 6 per LM-head weight per kept position, the causal score and value products."""
    import torch

    c = model.config
    head = model.get_output_embeddings().weight.numel()
    blocks = sum(p.numel() for n, p in model.named_parameters()
                 if p.dim() == 2 and "embed" not in n and "lm_head" not in n)
    width = c.num_attention_heads * (getattr(c, "head_dim", None)
                                     or c.hidden_size // c.num_attention_heads)
    attn = 3 * 4 * c.num_hidden_layers * width * positions * (positions + 1) / 2
    return ROWS * (6 * blocks * positions + 6 * head * (positions - prompt) + attn)


def child(shape: str, repeats: int) -> dict:
    """Time eager and compiled in this process (the inductor cache is the environment's)."""
    import torch

    from tailtheory.core.forward import full_forward

    torch.set_num_threads(1)
    model = build(shape)
    n, p = SHAPES[shape]["positions"], SHAPES[shape]["prompt"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (ROWS, n), generator=g)
    mask = torch.ones(ROWS, n, dtype=torch.bool)
    mask[:ROWS // 2, :5] = False
    keep = torch.arange(p - 1, n - 1)

    def step(f) -> float:
        t0 = time.perf_counter()
        z = full_forward(f, ids, mask, keep)
        torch.log_softmax(z.float(), -1).mean().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    compiled = torch.compile(model, dynamic=True)
    first = step(compiled)
    step(model)
    eager_s, compiled_s = [], []
    for _ in range(repeats):
        eager_s.append(step(model))
        compiled_s.append(step(compiled))
    return {"first_compiled_call_s": first, "eager_s": eager_s, "compiled_s": compiled_s,
            "flops": flops(model, n, p)}


def measure(shape: str, repeats: int) -> dict:
    """Two processes on one fresh inductor cache: cold, then warm."""
    from bench_step import matmul_peak
    from step_contenders import cpu_model

    runs = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        for _ in range(2):
            out = subprocess.run([sys.executable, __file__, "--child", shape,
                                  "--repeats", str(repeats)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
    eager = min(min(r["eager_s"]) for r in runs)
    comp = min(min(r["compiled_s"]) for r in runs)
    peak = matmul_peak()["gflops"]
    f = runs[0]["flops"]
    return {"rows": ROWS, **SHAPES[shape], "eager_best_s": eager, "compiled_best_s": comp,
            "compiled_speedup": eager / comp,
            "compile_cold_s": runs[0]["first_compiled_call_s"] - comp,
            "compile_warm_s": runs[1]["first_compiled_call_s"] - comp,
            "eager_pct_of_peak": 100 * f / eager / 1e9 / peak,
            "compiled_pct_of_peak": 100 * f / comp / 1e9 / peak,
            "peak_gflops": peak, "cpu_model": cpu_model(), "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="recipe,text",
                    help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats)))
        return
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    import torch

    from tailtheory.core.io import atomic_write_json

    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"platform": platform.platform(), "torch": torch.__version__,
                          "threads": 1, "loadavg_start": os.getloadavg()},
              "compile": "torch.compile(model, dynamic=True), inductor, default mode",
              "shapes": {}}
    print(f"{'shape':8} {'eager s':>8} {'compiled s':>10} {'speed-up':>8} {'cold s':>7} "
          f"{'warm s':>7} {'% peak e/c':>11}")
    for s in shapes:
        r = report["shapes"][s] = measure(s, args.repeats)
        print(f"{s:8} {r['eager_best_s']:8.3f} {r['compiled_best_s']:10.3f} "
              f"{r['compiled_speedup']:7.2f}x {r['compile_cold_s']:7.1f} "
              f"{r['compile_warm_s']:7.1f} {r['eager_pct_of_peak']:5.1f}/"
              f"{r['compiled_pct_of_peak']:4.1f}", flush=True)
    report["machine"]["cpu_model"] = report["shapes"][shapes[0]]["cpu_model"]
    report["machine"]["loadavg_end"] = os.getloadavg()
    atomic_write_json(OUT, report)
    print(f"stored {OUT}")


if __name__ == "__main__":
    main()
