"""Rollout decoding: the Hugging Face forward (backend ``hf``) against the inference engine
(``fast``, ``tailtheory.engine.rollout.fast``), side by side.

Setup: one torch thread; a randomly initialised model of the kk_trace warm start's size
(``SFTConfig().model``: Qwen2-style, hidden 128, 4 layers, 4 heads / 2 KV heads, V = 512,
723,072 parameters, plus an LM-head bias that sets how often EOS is sampled); B = 256 responses
= 32 prompts x 8 (each prompt repeated 8 times in a row, as the trainer passes GRPO groups),
prompt lengths 22-32 tokens (kk_trace's range), at most ``MAX_NEW`` = 120 new tokens,
temperature 1, no pruning. :meth:`RolloutEngine.generate` is timed whole (prefill, decoding,
sampling, the batch). Scenarios:

- ``full``: EOS bias -30, EOS is never sampled: every row runs to 120 tokens.
- ``mixed``: EOS bias +2.16 (probability ~1/60 per step): rows finish at lengths spread from 1
  to 120 (mean ~52), which is where dropping finished rows pays.

Paths: ``kv`` (float32 weights) and ``bf16`` (the bfloat16 copy / engine). Backends alternate
within each repeat so that load from other processes hits both alike; the best of ``REPEATS``
tokens/s is reported (tokens = response tokens up to and including EOS).

``--ablate`` also times the fast backend with other compaction thresholds
(``inference.COMPACT``: 0 = compact at every finished row, 1 = never, only mask).

Run: ``.venv/bin/python benchmarks/bench_rollout.py [--ablate]`` ->
``benchmarks/results/rollout.json``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

N_PROMPTS, GROUP, MAX_NEW = 32, 8, 120
PROMPT_LENS = (22, 32)
"""Shortest and longest prompt, in tokens (kk_trace's prompts with ``<bos>``)."""
EOS, PAD = 1, 0
SCENARIOS = {"full": -30.0, "mixed": 2.16}
"""Scenario -> LM-head bias of the EOS token."""
PATHS = ("kv", "bf16")
BACKENDS = ("hf", "fast")
REPEATS = 2
COMPACTS = (0.0, 0.25, 0.5, 1.0)
OUT = Path(__file__).resolve().parent / "results" / "rollout.json"


def make_model(eos_bias: float):
    """The warm start's architecture, random weights, an LM-head bias on EOS only."""
    import torch

    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.start.sft import SFTConfig

    model = tiny_lm(SFTConfig().model, seed=0)
    head = model.get_output_embeddings()
    bias = torch.zeros(head.weight.shape[0])
    bias[EOS] = eos_bias
    head.bias = torch.nn.Parameter(bias)
    return model


def make_prompts(V: int) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(N_PROMPTS):
        n = int(torch.randint(PROMPT_LENS[0], PROMPT_LENS[1] + 1, (1,), generator=g))
        out += [torch.randint(2, V, (n,), generator=g).tolist()] * GROUP
    return out


def time_generate(engine, prompts, seed: int = 0) -> dict:
    import torch

    t0 = time.perf_counter()
    rb = engine.generate(prompts, eos_id=EOS, pad_id=PAD,
                         generator=torch.Generator().manual_seed(seed))
    s = time.perf_counter() - t0
    tokens = int(rb.mask.sum())
    return {"seconds": s, "tokens": tokens, "tokens_per_s": tokens / s}


def run(ablate: bool) -> tuple[list[dict], list[dict]]:
    from tailtheory.engine.rollout import fast as inference
    from tailtheory.engine.rollout.engine import RolloutConfig, RolloutEngine

    rows, abl = [], []
    for scenario, bias in SCENARIOS.items():
        model = make_model(bias)
        prompts = make_prompts(model.config.vocab_size)
        for path in PATHS:
            engines = {b: RolloutEngine(model, RolloutConfig(path=path, backend=b,
                                                             max_new_tokens=MAX_NEW))
                       for b in BACKENDS}
            best = {}
            for rep in range(REPEATS):
                for b, eng in engines.items():
                    r = time_generate(eng, prompts)
                    if b not in best or r["tokens_per_s"] > best[b]["tokens_per_s"]:
                        best[b] = r
            for b in BACKENDS:
                rows.append({"scenario": scenario, "path": path, "backend": b, **best[b]})
            print(f"{scenario:>6} {path:>5}  hf {best['hf']['tokens_per_s']:8.0f} tok/s  "
                  f"fast {best['fast']['tokens_per_s']:8.0f} tok/s  ratio "
                  f"{best['fast']['tokens_per_s'] / best['hf']['tokens_per_s']:5.2f}  "
                  f"(tokens {best['hf']['tokens']} / {best['fast']['tokens']})", flush=True)
            if not ablate or scenario != "mixed":
                continue
            default = inference.COMPACT
            try:
                for c in COMPACTS:
                    inference.COMPACT = c
                    r = max((time_generate(engines["fast"], prompts) for _ in range(REPEATS)),
                            key=lambda r: r["tokens_per_s"])
                    abl.append({"scenario": scenario, "path": path, "compact": c, **r})
                    print(f"        fast COMPACT={c:<4} {r['tokens_per_s']:8.0f} tok/s",
                          flush=True)
            finally:
                inference.COMPACT = default
    return rows, abl


def main() -> None:
    import torch

    from tailtheory.core.io import atomic_write_json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ablate", action="store_true", help="also time COMPACT thresholds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, abl = run(args.ablate)
    by = {(r["scenario"], r["path"], r["backend"]): r for r in rows}
    summary = [{"scenario": s, "path": p,
                "ratio": by[(s, p, "fast")]["tokens_per_s"] / by[(s, p, "hf")]["tokens_per_s"]}
               for s in SCENARIOS for p in PATHS]
    atomic_write_json(OUT, {"torch": torch.__version__, "machine": platform.machine(),
                            "processor": platform.processor(), "threads": 1,
                            "B": N_PROMPTS * GROUP, "group": GROUP, "max_new_tokens": MAX_NEW,
                            "repeats": REPEATS, "rows": rows, "summary": summary,
                            "compaction": abl})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
