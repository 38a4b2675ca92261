"""Chunked per-token statistics against the naive log_softmax code: peak memory and time.

Memory: each (vocabulary, variant, mode) runs once in a fresh subprocess; its peak is the growth of
the process's max RSS (``resource.getrusage``) over its RSS once the inputs exist (built in place,
so no transient precedes the call), which counts every temporary the call makes (tracemalloc does
not see torch's allocations). Time: both variants alternate in one subprocess, best of
``REPEATS`` each, so that load from other processes hits both alike. Modes:

- ``stats``: logp, entropy, sum p^2 and the KL to reference logits, no autograd;
- ``grad``: logp, then backward to the logits. The logits' gradient is one full (B, T, V)
  tensor for either variant: that is the floor of this mode.

Targets: chunked peak <= 0.25x naive, time <= 1.2x naive.
Run: ``.venv/bin/python benchmarks/bench_token_stats.py`` -> benchmarks/results/token_stats.json
"""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {32_000: (8, 512), 151_936: (4, 256)}
"""V -> (B, T): logits of ~0.5-0.6 GiB in float32 (Qwen2.5's vocabulary is 151,936)."""
REPEATS = 5
TARGET_MEM, TARGET_TIME = 0.25, 1.2
OUT = Path(__file__).resolve().parent / "results" / "token_stats.json"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def _inputs(V: int, B: int, T: int, mode: str):
    import torch

    g = torch.Generator().manual_seed(0)
    z = torch.empty(B, T, V).normal_(generator=g).mul_(3.0)           # in place: no transient
    ref = torch.empty(B, T, V).normal_(generator=g).mul_(0.1).add_(z) if mode == "stats" else None
    return z, ref, torch.randint(0, V, (B, T), generator=g)


def _call(fn, z, ref, k, mode: str) -> None:
    if mode == "stats":
        fn(z, k, ref_logits=ref)
    else:
        zg = z.requires_grad_(True)
        fn(zg, k)["logp"].sum().backward()
        zg.grad = None


def child_memory(V: int, B: int, T: int, variant: str, mode: str) -> dict:
    """Peak extra RSS of one call, in this (fresh) process."""
    from tailtheory.core.stats import naive_token_stats, token_stats

    z, ref, k = _inputs(V, B, T, mode)
    base = _rss_mib()
    _call(token_stats if variant == "chunked" else naive_token_stats, z, ref, k, mode)
    return {"V": V, "B": B, "T": T, "variant": variant, "mode": mode,
            "logits_mib": z.numel() * 4 / 2**20, "peak_extra_mib": _max_rss_mib() - base}


def child_time(V: int, B: int, T: int, mode: str) -> dict:
    """Best-of-REPEATS time of each variant, interleaved so that load on the machine hits both."""
    from tailtheory.core.stats import naive_token_stats, token_stats

    z, ref, k = _inputs(V, B, T, mode)
    times = {"naive": [], "chunked": []}
    for _ in range(REPEATS):
        for name, fn in (("naive", naive_token_stats), ("chunked", token_stats)):
            t0 = time.perf_counter()
            _call(fn, z, ref, k, mode)
            times[name].append(time.perf_counter() - t0)
    return {name: min(ts) for name, ts in times.items()}


def _child(*args) -> dict:
    cmd = [sys.executable, __file__, "--child", *map(str, args)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_all() -> list[dict]:
    rows = []
    for V, (B, T) in SHAPES.items():
        for mode in ("stats", "grad"):
            t = _child("time", V, B, T, mode)
            for variant in ("naive", "chunked"):
                rows.append({**_child("memory", V, B, T, variant, mode), "time_s": t[variant]})
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    """chunked / naive per (V, mode), with the targets."""
    by = {(r["V"], r["mode"], r["variant"]): r for r in rows}
    out = []
    for V, mode in sorted({(r["V"], r["mode"]) for r in rows}):
        c, n = by[(V, mode, "chunked")], by[(V, mode, "naive")]
        mem, tim = c["peak_extra_mib"] / n["peak_extra_mib"], c["time_s"] / n["time_s"]
        out.append({"V": V, "mode": mode, "mem_ratio": mem, "time_ratio": tim,
                    "chunked_extra_per_logits": c["peak_extra_mib"] / c["logits_mib"],
                    "naive_extra_per_logits": n["peak_extra_mib"] / n["logits_mib"],
                    "meets_mem_target": mem <= TARGET_MEM, "meets_time_target": tim <= TARGET_TIME})
    return out


def main() -> None:
    import torch

    from tailtheory.core.io import atomic_write_json

    rows = run_all()
    summary = ratios(rows)
    print(f"{'V':>7} {'mode':>5} {'logits MiB':>10} {'naive MiB':>9} {'chunk MiB':>9} "
          f"{'mem x':>6} {'naive s':>7} {'chunk s':>7} {'time x':>6}")
    by = {(r["V"], r["mode"], r["variant"]): r for r in rows}
    for s in summary:
        n, c = by[(s["V"], s["mode"], "naive")], by[(s["V"], s["mode"], "chunked")]
        print(f"{s['V']:>7} {s['mode']:>5} {n['logits_mib']:>10.0f} {n['peak_extra_mib']:>9.0f} "
              f"{c['peak_extra_mib']:>9.0f} {s['mem_ratio']:>6.3f} {n['time_s']:>7.3f} "
              f"{c['time_s']:>7.3f} {s['time_ratio']:>6.2f}")
    atomic_write_json(OUT, {"torch": torch.__version__, "machine": platform.machine(),
                            "threads": torch.get_num_threads(), "repeats": REPEATS,
                            "targets": {"mem_ratio": TARGET_MEM, "time_ratio": TARGET_TIME},
                            "rows": rows, "summary": summary})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, (V, B, T), rest = sys.argv[2], map(int, sys.argv[3:6]), sys.argv[6:]
        fn = child_memory if kind == "memory" else child_time
        print(json.dumps(fn(V, B, T, *rest)))
    else:
        main()
