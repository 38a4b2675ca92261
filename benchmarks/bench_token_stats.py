"""Chunked per-token statistics against the naive log_softmax code: peak memory and time.

Each (vocabulary, variant, mode) runs in its own subprocess; peak memory is the growth of the
process's max RSS (``resource.getrusage``) over its RSS once the inputs exist, so it counts
every temporary the call makes (tracemalloc does not see torch's allocations). Modes:

- ``stats``: logp, entropy, sum p^2 and the KL to reference logits, no autograd;
- ``grad``: logp, then backward to the logits. The logits' gradient is one full (B, T, V)
  tensor for either variant: that is the floor of this mode.

Targets (the issue): chunked peak <= 0.25x naive, time <= 1.2x naive.
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
REPEATS = 3
TARGET_MEM, TARGET_TIME = 0.25, 1.2
OUT = Path(__file__).resolve().parent / "results" / "token_stats.json"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def child(V: int, B: int, T: int, variant: str, mode: str) -> dict:
    """One measurement in this process (called in a fresh subprocess)."""
    import torch

    from tailtheory.engine.stats import naive_token_stats, token_stats

    fn = token_stats if variant == "chunked" else naive_token_stats
    g = torch.Generator().manual_seed(0)
    z = torch.empty(B, T, V).normal_(generator=g).mul_(3.0)           # in place: no transient
    ref = torch.empty(B, T, V).normal_(generator=g).mul_(0.1).add_(z) if mode == "stats" else None
    k = torch.randint(0, V, (B, T), generator=g)
    if mode == "grad":
        z.requires_grad_(True)
    base, peak_before = _rss_mib(), _max_rss_mib()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        if mode == "stats":
            fn(z, k, ref_logits=ref)
        else:
            fn(z, k)["logp"].sum().backward()
            z.grad = None
        times.append(time.perf_counter() - t0)
    return {"V": V, "B": B, "T": T, "variant": variant, "mode": mode,
            "logits_mib": z.numel() * 4 / 2**20, "peak_extra_mib": _max_rss_mib() - base,
            "peak_before_mib": peak_before, "base_mib": base, "time_s": min(times)}


def run_all() -> list[dict]:
    rows = []
    for V, (B, T) in SHAPES.items():
        for mode in ("stats", "grad"):
            for variant in ("naive", "chunked"):
                cmd = [sys.executable, __file__, "--child", str(V), str(B), str(T), variant, mode]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                rows.append(json.loads(out.strip().splitlines()[-1]))
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

    from tailtheory.io import atomic_write_json

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
        V, B, T = (int(a) for a in sys.argv[2:5])
        print(json.dumps(child(V, B, T, sys.argv[5], sys.argv[6])))
    else:
        main()
