"""Peak memory of the theory functions on real-vocabulary logits: one-shot formulas vs row blocks.

Each (function, variant) runs once in a fresh subprocess; its peak is the growth of the process's
max RSS (``resource.getrusage``) over its RSS once the float32 inputs exist (built in place, so
no transient precedes the call). ``naive`` is the one-shot formula on whole float64 tensors (the
code before chunking); ``chunked`` is the package function, which walks blocks of
``tailtheory.core.stats.CHUNK_ELEMENTS`` logits. ``logprob_mismatch`` returns a float64
``(B, T, V)`` tensor, so its floor is 2x the float32 logits; the others return ``(B, T)``.

Run: ``.venv/bin/python benchmarks/bench_theory_memory.py`` -> benchmarks/results/theory_memory.json
"""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

V, B, T = 151_936, 4, 64
"""Qwen2.5's vocabulary; B*T = 256 positions: 148 MiB of float32 logits per tensor."""
FUNCTIONS = ("logprob_mismatch", "sampled_mismatch_bias", "score_sq_norm", "pruned_kl")
OUT = Path(__file__).resolve().parent / "results" / "theory_memory.json"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def _naive(name: str):
    """The one-shot formulas (whole tensors converted to float64 first)."""
    import math

    import torch

    def lsm(z):
        return torch.log_softmax(z.to(torch.float64), -1)

    if name == "logprob_mismatch":
        return lambda z, zp, k, keep: lsm(zp) - lsm(z)
    if name == "sampled_mismatch_bias":
        return lambda z, zp, k, keep: (torch.softmax(zp.to(torch.float64), -1)
                                       * (lsm(zp) - lsm(z))).sum(-1)
    if name == "score_sq_norm":
        def sq(z, zp, k, keep):
            z = z.to(torch.float64)
            p_k = torch.log_softmax(z, -1).gather(-1, k[..., None])[..., 0].exp()
            c = z - z.amax(-1, keepdim=True)
            return 1 - 2 * p_k + torch.exp(torch.logsumexp(2 * c, -1) - 2 * torch.logsumexp(c, -1))
        return sq

    def kl(z, zp, k, keep):
        z = z.to(torch.float64)
        lpt = torch.log_softmax(z.masked_fill(~keep, -math.inf), -1)
        lp = torch.log_softmax(z, -1)
        return torch.where(keep, lpt.exp() * (lpt - lp), torch.zeros_like(lp)).sum(-1)
    return kl


def _chunked(name: str):
    from tailtheory.mismatch.logprob import logprob_mismatch, sampled_mismatch_bias
    from tailtheory.pruning.vocab import pruned_kl
    from tailtheory.softmax.scores import score_sq_norm

    return {"logprob_mismatch": lambda z, zp, k, keep: logprob_mismatch(z, zp),
            "sampled_mismatch_bias": lambda z, zp, k, keep: sampled_mismatch_bias(z, zp),
            "score_sq_norm": lambda z, zp, k, keep: score_sq_norm(z, k),
            "pruned_kl": lambda z, zp, k, keep: pruned_kl(z, keep)}[name]


def child(name: str, variant: str) -> dict:
    """Peak extra RSS and time of one call, in this (fresh) process."""
    import torch

    fn = _naive(name) if variant == "naive" else _chunked(name)
    g = torch.Generator().manual_seed(0)
    z = torch.empty(B, T, V).normal_(generator=g).mul_(3.0)           # in place: no transient
    zp = torch.empty(B, T, V).normal_(generator=g).mul_(0.05).add_(z)
    k = torch.randint(0, V, (B, T), generator=g)
    keep = z > -4.0 if name == "pruned_kl" else None
    base = _rss_mib()
    t0 = time.perf_counter()
    out = fn(z, zp, k, keep)
    dt = time.perf_counter() - t0
    return {"function": name, "variant": variant, "V": V, "B": B, "T": T,
            "logits_mib": z.numel() * 4 / 2**20,
            "out_mib": out.numel() * out.element_size() / 2**20,
            "peak_extra_mib": _max_rss_mib() - base, "time_s": dt}


def _child(*args) -> dict:
    cmd = [sys.executable, __file__, "--child", *map(str, args)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    import torch

    from tailtheory.core.io import atomic_write_json
    from tailtheory.core.stats import CHUNK_ELEMENTS

    rows = [_child(name, variant) for name in FUNCTIONS for variant in ("naive", "chunked")]
    by = {(r["function"], r["variant"]): r for r in rows}
    summary = []
    print(f"{'function':>22} {'logits MiB':>10} {'out MiB':>8} {'naive MiB':>9} {'chunk MiB':>9} "
          f"{'naive x':>7} {'chunk x':>7} {'naive s':>7} {'chunk s':>7}")
    for name in FUNCTIONS:
        n, c = by[(name, "naive")], by[(name, "chunked")]
        s = {"function": name, "naive_extra_per_logits": n["peak_extra_mib"] / n["logits_mib"],
             "chunked_extra_per_logits": c["peak_extra_mib"] / c["logits_mib"],
             "mem_ratio": c["peak_extra_mib"] / n["peak_extra_mib"],
             "time_ratio": c["time_s"] / n["time_s"]}
        summary.append(s)
        print(f"{name:>22} {n['logits_mib']:>10.0f} {c['out_mib']:>8.0f} "
              f"{n['peak_extra_mib']:>9.0f} {c['peak_extra_mib']:>9.0f} "
              f"{s['naive_extra_per_logits']:>7.2f} {s['chunked_extra_per_logits']:>7.2f} "
              f"{n['time_s']:>7.2f} {c['time_s']:>7.2f}")
    atomic_write_json(OUT, {"torch": torch.__version__, "machine": platform.machine(),
                            "threads": torch.get_num_threads(), "chunk_elements": CHUNK_ELEMENTS,
                            "rows": rows, "summary": summary})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3])))
    else:
        main()
