"""The fused LM head against TRL's fused head and the full-logits code: peak memory and time.

Inputs: hidden states ``h (N, H)`` and an LM head ``W (V, H)`` (no bias), float32, N = 128
sampled tokens, H = 512, V = 32,000 and 151,936 (Qwen2.5's vocabulary), temperature 1. Variants:

- ``trl``: TRL's fused head, the autograd function ``trl.trainer.utils.add_fused_lm_head``
  calls (``trl.kernels.ChunkedLogProbFunction``, vocabulary chunk
  ``_CHUNKED_LOGPROB_CHUNK_SIZE``; on a CPU it folds torch tiles), asked for ``log_probs``,
  ``entropy`` and ``log_sum_sq_probs``: the statistics the two heads share.
- ``naive``: ``h @ W.T`` in full, then ``naive_token_stats`` (``naive_fused_token_stats``).
- ``logits+token_stats``: ``h @ W.T`` in full, then the chunked ``token_stats``: the engine's
  trainer forward before the fused head.
- ``fused``: :func:`tailtheory.core.fused.fused_token_stats` (logp, entropy, sum p^2, log sum p^2).
- ``fused+dvp+kl``: the same plus a rollout side (a perturbed copy of ``h``: the exact KL
  rollout || train) and DVP's min-p set at rho = 1e-4 on it (pruned logp, pruned mass). It runs
  three matrix products per tile in the forward (rule pass, train, rollout), so it is the cost
  of the extra statistics, not a like-for-like row.

Modes: ``stats`` (no autograd) and ``grad`` (``logp.sum()`` backward to ``h`` and ``W``; the
float32 ``dW (V, H)`` and ``dh (N, H)`` are the floor of that mode, in every variant).
Memory: one fresh subprocess per (V, mode, variant), one thread; its peak is the growth of the
process's max RSS (``resource.getrusage``) over its RSS once the inputs exist, so it counts
every temporary the call makes, torch's and the allocator's alike. Time: one subprocess per
(V, mode, threads), every variant interleaved (one warm-up call each on a small vocabulary,
then best of ``REPEATS``), so that load from other processes hits all alike; torch intra-op
threads 1 and 2 (this machine's cores) side by side (``fused+dvp+kl`` at one thread only). Each
time child also records the largest difference between the fused head's logp, entropy and
log sum p^2 and TRL's.

Engine scale (``engine_forward``): the trainer's forward with its backward through a tiny
Qwen2-style model (hidden 128, 16 sequences of 16 prompt + 32 response tokens, one thread), as
the engine runs it today (``full_forward`` over the whole sequence, the response slice, then
``token_stats``) and through the fused head (``hidden_forward``, the same slice, then
``fused_token_stats``), at the engine's V = 512 and at 151,936.

Targets: fused <= TRL in memory and time (moonshot: 0.8x TRL's time).
Run: ``.venv/bin/python benchmarks/bench_fused.py`` -> ``benchmarks/results/fused_lm_head.json``.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

N_TOKENS, HIDDEN = 128, 512
"""Sampled tokens per call (B * T) and hidden size (a 0.5B-class model's is 896)."""
VOCABS = (32_000, 151_936)
VARIANTS = ("trl", "naive", "logits+token_stats", "fused", "fused+dvp+kl")
THREADS = (1, 2)
"""torch intra-op threads timed side by side (this machine has 2 cores). The fused head's
default vocabulary tile depends on it (``VOCAB_TILE`` / ``VOCAB_TILE_THREADED``), so its memory
is measured at each; the other variants' tiles do not, so theirs once, at one thread."""
ONE_THREAD_ONLY = ("fused+dvp+kl",)
"""Timed at one thread only, to keep the run under 5 minutes."""
REPEATS = 2
"""Timed calls per variant after the warm-up (best reported); 2 keeps the run under 5 minutes."""
WARMUP_V = 1024
TARGET_TIME, MOONSHOT_TIME, TARGET_MEM = 1.0, 0.8, 1.0
OUT = Path(__file__).resolve().parent / "results" / "fused_lm_head.json"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def _inputs(V: int, N: int = N_TOKENS):
    import torch

    g = torch.Generator().manual_seed(0)
    h = torch.empty(N, HIDDEN).normal_(generator=g)                     # in place: no transient
    W = torch.empty(V, HIDDEN).normal_(generator=g).mul_(3.0 / HIDDEN**0.5)  # logits ~ N(0, 9)
    h_roll = torch.empty(N, HIDDEN).normal_(generator=g).mul_(0.01).add_(h)
    return h, W, h_roll, torch.randint(0, V, (N,), generator=g)


def _variant(name: str):
    """``fn(h, W, h_roll, k) -> dict`` of one variant's statistics (``logp`` among them)."""
    from tailtheory.core.fused import fused_token_stats, naive_fused_token_stats
    from tailtheory.core.stats import token_stats

    if name == "trl":
        from trl.kernels import ChunkedLogProbFunction
        from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE as chunk

        def trl(h, W, hr, k):
            lp, ent, lsq, _, _ = ChunkedLogProbFunction.apply(
                h, W, None, k, 1.0, chunk, None, 1.0, ("entropy", "log_sum_sq_probs"))
            return {"logp": lp, "entropy": ent, "log_sum_p2": lsq}
        return trl
    if name == "naive":
        return lambda h, W, hr, k: naive_fused_token_stats(h[None], W, k[None])
    if name == "logits+token_stats":
        return lambda h, W, hr, k: token_stats((h @ W.T)[None], k[None])
    if name == "fused":
        return lambda h, W, hr, k: fused_token_stats(h[None], W, k[None])
    return lambda h, W, hr, k: fused_token_stats(h[None], W, k[None], h_roll=hr[None], W_roll=W,
                                                 rule="min_p", threshold=1e-4)


def _call(fn, h, W, hr, k, mode: str) -> dict:
    import torch

    if mode == "stats":
        with torch.no_grad():
            return fn(h, W, hr, k)
    h.requires_grad_(True)
    W.requires_grad_(True)
    out = fn(h, W, hr, k)
    out["logp"].sum().backward()
    h.grad = W.grad = None
    h.requires_grad_(False)
    W.requires_grad_(False)
    return out


def child_memory(V: int, variant: str, mode: str, threads: int = 1) -> dict:
    """Peak extra RSS of one call, in this (fresh) process."""
    import torch

    torch.set_num_threads(threads)
    fn = _variant(variant)
    h, W, hr, k = _inputs(V)
    base = _rss_mib()
    _call(fn, h, W, hr, k, mode)
    return {"peak_extra_mib": _max_rss_mib() - base}


def _agreement(out: dict) -> float:
    """Largest |fused - TRL| over the statistics both compute (logits ~ N(0, 9): O(1) values)."""
    ref, ours = out["trl"], out["fused"]
    return max(float((ours[n].detach().reshape(-1) - ref[n].detach().reshape(-1)).abs().max())
               for n in ref)


def child_time(V: int, mode: str, threads: int) -> dict:
    """Best-of-REPEATS time of every variant, interleaved, after a warm-up on a small V."""
    import torch

    torch.set_num_threads(threads)
    fns = {name: _variant(name) for name in VARIANTS
           if threads == 1 or name not in ONE_THREAD_ONLY}
    for fn in fns.values():
        _call(fn, *_inputs(WARMUP_V, 16), mode)
    h, W, hr, k = _inputs(V)
    times = {name: float("inf") for name in fns}
    outs = {}
    for _ in range(REPEATS):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            outs[name] = _call(fn, h, W, hr, k, mode)
            times[name] = min(times[name], time.perf_counter() - t0)
    return {"times": times, "max_abs_diff_vs_trl": _agreement(outs),
            "load_avg_1min": os.getloadavg()[0]}


ENGINE_SHAPES = ((512, 4), (151_936, 1))
"""(V, layers) of the engine-scale models: the engine's default vocabulary, and Qwen2.5's."""


def child_engine() -> dict:
    """Best-of-3 time of the trainer forward + backward, full logits against the fused head."""
    import torch

    from tailtheory.core.forward import full_forward, hidden_forward, lm_head
    from tailtheory.core.fused import fused_token_stats
    from tailtheory.core.models import tiny_lm
    from tailtheory.core.stats import token_stats

    torch.set_num_threads(1)
    out = []
    for V, layers in ENGINE_SHAPES:
        model = tiny_lm(vocab_size=V, hidden=128, layers=layers, heads=4, kv_heads=2, seed=0)
        ids = torch.randint(0, V, (16, 48), generator=torch.Generator().manual_seed(0))
        k, P = ids[:, 17:], 16                                          # response (16, 31)

        def full():
            z = full_forward(model, ids)[:, P:-1]                       # (B, T, V)
            token_stats(z, k)["logp"].sum().backward()

        def fused():
            W, b = lm_head(model)
            h = hidden_forward(model, ids)[:, P:-1]                     # (B, T, H)
            fused_token_stats(h, W, k, b)["logp"].sum().backward()

        best = {"full_logits": float("inf"), "fused": float("inf")}
        for _ in range(3):
            for name, fn in (("full_logits", full), ("fused", fused)):
                model.zero_grad(set_to_none=True)
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
        out.append({"V": V, "layers": layers, "hidden": 128, "B": 16, "T": 31, **best,
                    "fused_vs_full": best["fused"] / best["full_logits"]})
    return {"rows": out}


def _child(*args, threads: int = 1) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, __file__, "--child", *map(str, args)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def cpu_name() -> str:
    """CPU model from /proc/cpuinfo and its core count."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores"


def run_all(cpu: str) -> list[dict]:
    rows = []
    for V in VOCABS:
        for mode in ("stats", "grad"):
            mem = {v: _child("memory", V, v, mode)["peak_extra_mib"] for v in VARIANTS}
            floor = (V + N_TOKENS) * HIDDEN * 4 / 2**20 if mode == "grad" else 0.0  # dW, dh
            for threads in THREADS:
                t = _child("time", V, mode, threads, threads=threads)
                if threads > 1:
                    mem["fused"] = _child("memory", V, "fused", mode, threads,
                                          threads=threads)["peak_extra_mib"]
                for v in t["times"]:
                    rows.append({"V": V, "N": N_TOKENS, "H": HIDDEN, "mode": mode,
                                 "variant": v, "threads": threads,
                                 "device": f"CPU: {cpu}, {threads} thread(s)",
                                 "peak_extra_mib": round(mem[v], 1),
                                 "grad_floor_mib": round(floor, 1),
                                 "time_s": round(t["times"][v], 4),
                                 "max_abs_diff_vs_trl": t["max_abs_diff_vs_trl"],
                                 "load_avg_1min": t["load_avg_1min"]})
    return _ratios(rows)


def _ratios(rows: list[dict]) -> list[dict]:
    """Memory and time against TRL (same V, mode, threads); time against 1 thread."""
    by = {(r["V"], r["mode"], r["threads"], r["variant"]): r for r in rows}
    for r in rows:
        trl = by[(r["V"], r["mode"], r["threads"], "trl")]
        one = by[(r["V"], r["mode"], 1, r["variant"])]
        r["mem_vs_trl"] = round(r["peak_extra_mib"] / trl["peak_extra_mib"], 3)
        r["time_vs_trl"] = round(r["time_s"] / trl["time_s"], 3)
        r["time_vs_1_thread"] = round(r["time_s"] / one["time_s"], 3)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """The fused row of each (V, mode, threads) against the targets."""
    return [{"V": r["V"], "mode": r["mode"], "threads": r["threads"],
             "mem_vs_trl": r["mem_vs_trl"], "time_vs_trl": r["time_vs_trl"],
             "meets_mem_target": r["mem_vs_trl"] <= TARGET_MEM,
             "meets_time_target": r["time_vs_trl"] <= TARGET_TIME,
             "meets_moonshot": r["time_vs_trl"] <= MOONSHOT_TIME}
            for r in rows if r["variant"] == "fused"]


def markdown(rows: list[dict]) -> str:
    lines = ["| V | mode | variant | threads | peak extra MiB | × TRL | time s | × TRL | "
             "× 1 thread | device |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['V']:,} | {r['mode']} | {r['variant']} | {r['threads']} | "
                     f"{r['peak_extra_mib']:,.0f} | {r['mem_vs_trl']:.2f} | {r['time_s']:.3f} | "
                     f"{r['time_vs_trl']:.2f} | {r['time_vs_1_thread']:.2f} | {r['device']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    import torch
    import trl

    from tailtheory.core.io import atomic_write_json

    t0 = time.perf_counter()
    cpu = cpu_name()
    rows = run_all(cpu)
    engine = _child("engine", 0)["rows"]
    print(markdown(rows))
    for e in engine:
        print(f"engine forward+backward, V={e['V']:,}: full logits {e['full_logits']:.3f} s, "
              f"fused {e['fused']:.3f} s ({e['fused_vs_full']:.2f}x)")
    for s in summary(rows):
        print(f"fused, V={s['V']:,} {s['mode']}, {s['threads']} thread(s): memory "
              f"{s['mem_vs_trl']:.2f}x TRL (target <= {TARGET_MEM}), time {s['time_vs_trl']:.2f}x "
              f"TRL (target <= {TARGET_TIME}, moonshot <= {MOONSHOT_TIME})")
    atomic_write_json(OUT, {
        "setup": {"N": N_TOKENS, "H": HIDDEN, "vocabs": VOCABS, "dtype": "float32",
                  "threads": THREADS, "repeats": REPEATS, "cpu": cpu, "torch": torch.__version__,
                  "trl": trl.__version__, "machine": platform.machine(),
                  "seconds": round(time.perf_counter() - t0, 1)},
        "targets": {"mem_vs_trl": TARGET_MEM, "time_vs_trl": TARGET_TIME,
                    "moonshot_time_vs_trl": MOONSHOT_TIME},
        "rows": rows, "summary": summary(rows), "engine_forward": engine})
    print(f"wrote {OUT} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, V, rest = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
        if kind == "engine":
            out = child_engine()
        elif kind == "time":
            out = child_time(V, rest[0], int(rest[1]))
        else:
            out = child_memory(V, rest[0], rest[1], *map(int, rest[2:]))
        print(json.dumps(out))
    else:
        main()
