"""Runs of a study packed on one machine: runs per hour as more of them share it.

What it measures: the local executor (``tailtheory study NAME --executor local``) training K runs
at a time, for several K, and at each K the wall time, the runs per hour and each run's peak
memory. The runs are the base rung's GRPO recipe (``matched``: GRPO on ``kk_prose`` from the base
rung's warm start, :mod:`tailtheory.engine.start.rungs`), ``--steps`` steps each (20), seeds
that no point shares; each point trains K x ``--rounds`` runs (default 1 round: K runs at once).

- ``--device cpu``: K worker processes (``--workers K``), K in (1, 2) by default; each child has
  one torch thread, as the executor starts them.
- ``--device cuda``: K processes per visible GPU (``--device cuda --per-gpu K``), K in (1, 2, 4,
  8, 16); then, if ``nvidia-cuda-mps-control -d`` starts, the same points again under MPS (the
  daemon is stopped after, whatever happens).

Every run trains in a child process of the executor's own pool
(``tailtheory.experiments.runs._run_workers``; at K = 1 the executor itself trains in its own
process, here a child too, so every point pays the same interpreter start-up). Memory: each
child's peak resident set (``VmHWM`` in ``/proc/PID/status``) and, on a GPU, its memory in
``nvidia-smi --query-compute-apps`` (what it holds: context and allocator cache included), both
polled every :data:`SAMPLE_S` s, so a peak held for less than that can be missed. Where
``nvidia-smi`` names other process ids than this machine's (a container) the GPU column is the
rise of the GPUs' memory in use over the point, divided by the runs sharing them (labelled so).

The runs train in a run cache of their own (a temporary ``TAILTHEORY_CACHE``, the warm start
copied in from ``weights/`` before the first point), never in ``cache/``; nothing is stored in
``results/``. Rows go to ``--out`` (default ``benchmarks/results/packing-<device>.json``) with a
markdown table beside it (``.md``), naming the device (the CPU's model and ISA, or the GPU), the
machine's cores, torch and the command.

    python benchmarks/bench_packing.py                    # the CPU curve (minutes a point)
    python benchmarks/bench_packing.py --device cuda      # the GPU curve, then under MPS
    python benchmarks/bench_packing.py --smoke            # well under a minute; checks the script

``--smoke``: 2-step runs of a tiny random model (the recipe's task, 2 prompts x 2 responses),
K in (1, 2), rows into a temporary folder: it checks the script, not a number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

KS = {"cpu": (1, 2), "cuda": (1, 2, 4, 8, 16)}
"""The K of each point by device: worker processes (CPU), processes per GPU (CUDA)."""

STEPS = 20
"""Steps of each run: enough for the step's cost to outweigh a child's start-up."""

SMOKE = {"ks": (1, 2), "steps": 2}
"""``--smoke``: the smallest curve (with a tiny model, :func:`run_configs`)."""

SAMPLE_S = 0.2
"""Seconds between two polls of the children's memory."""


def parse(argv=None) -> argparse.Namespace:
    """The command line, its defaults resolved: ``ks``, ``steps``, ``out`` (the JSON's path;
    ``None`` under ``--smoke``: a temporary folder's, made by :func:`main`)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--ks", type=int, nargs="+", help="the points' K (default: by device)")
    p.add_argument("--steps", type=int, help=f"steps of each run (default {STEPS})")
    p.add_argument("--rounds", type=int, default=1, help="runs per worker at each point")
    p.add_argument("--no-mps", dest="mps", action="store_false", help="cuda: skip the MPS pass")
    p.add_argument("--out", help="the JSON's path (default benchmarks/results/"
                                 "packing-<device>.json; --smoke: a temporary folder)")
    p.add_argument("--smoke", action="store_true", help="2-step tiny runs, K in (1, 2)")
    args = p.parse_args(argv)
    args.ks = tuple(args.ks or (SMOKE["ks"] if args.smoke else KS[args.device]))
    args.steps = args.steps or (SMOKE["steps"] if args.smoke else STEPS)
    if min(args.ks) < 1 or args.steps < 1 or args.rounds < 1:
        p.error("--ks, --steps and --rounds must be >= 1")
    if args.out is None and not args.smoke:
        args.out = str(RESULTS / f"packing-{args.device}.json")
    return args


def run_configs(seeds, steps: int, device: str, smoke: bool) -> list:
    """The runs of one point: the ``matched`` recipe at each seed (``smoke``: from a tiny random
    model, 2 prompts x 2 responses, 4 held-out problems)."""
    from tailtheory.experiments.recipes import recipe_config

    small = dict(model="tiny", prompts_per_step=2, group_size=2, eval_every=1, eval_n=4)
    return [recipe_config("matched", steps=steps, seed=s, device=device, **(small if smoke else {}))
            for s in seeds]


def vm_hwm_mib(status: str) -> float | None:
    """The peak resident set (``VmHWM``) in a ``/proc/PID/status`` text, MiB."""
    line = next((ln for ln in status.splitlines() if ln.startswith("VmHWM:")), None)
    return int(line.split()[1]) / 1024 if line else None


def seed_of(cmdline: bytes) -> int | None:
    """The seed of the run a worker's command line trains (``python -m
    tailtheory.experiments.runs FIELDS_JSON``); ``None`` for any other process."""
    args = cmdline.rstrip(b"\0").split(b"\0")
    if b"tailtheory.experiments.runs" not in args[:-1]:
        return None
    return json.loads(args[-1])["seed"]


def parse_smi(text: str) -> dict[int, float]:
    """``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`` as
    pid -> MiB."""
    rows = [ln.split(",") for ln in text.strip().splitlines() if ln.strip()]
    return {int(pid): float(mib) for pid, mib in rows if mib.strip().isdigit()}


def _children() -> list[int]:
    pids = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def _smi(query: str) -> str:
    return subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=10).stdout


class Sampler:
    """Polls the run children's peaks every :data:`SAMPLE_S` s in a thread: ``rss`` and ``gpu``
    (seed -> MiB), ``gpu_total`` (the GPUs' memory in use, MiB, its peak)."""

    def __init__(self, gpu: bool):
        self.rss, self.gpu, self.gpu_total, self._on = {}, {}, 0.0, gpu
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def gpu_used(self) -> float:
        return sum(float(x) for x in _smi("gpu=memory.used").split()) if self._on else 0.0

    def _tick(self) -> None:
        seeds = {}
        for pid in _children():
            with contextlib.suppress(OSError, ValueError, KeyError):
                seed = seed_of(Path(f"/proc/{pid}/cmdline").read_bytes())
                hwm = vm_hwm_mib(Path(f"/proc/{pid}/status").read_text())
                if seed is not None and hwm is not None:
                    seeds[pid] = seed
                    self.rss[seed] = max(self.rss.get(seed, 0.0), hwm)
        if self._on:
            for pid, mib in parse_smi(_smi("compute-apps=pid,used_memory")).items():
                if pid in seeds:
                    self.gpu[seeds[pid]] = max(self.gpu.get(seeds[pid], 0.0), mib)
            self.gpu_total = max(self.gpu_total, self.gpu_used())

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._tick()
            self._stop.wait(SAMPLE_S)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _stats(values) -> dict | None:
    values = [round(v, 1) for v in values]
    return {"max": max(values), "mean": round(sum(values) / len(values), 1),
            "per_run": values} if values else None


def row(mode: str, k: int, workers: int, runs: int, wall_s: float, rss: dict, gpu: dict,
        gpu_rise: float | None = None, cpu_s: list | None = None) -> dict:
    """One point of the curve: K, its processes, the runs and their wall seconds, runs per hour,
    each run's peak memory (``rss``, ``gpu``: seed -> MiB; without ``gpu``, ``gpu_rise``: the
    GPUs' rise in use over the point, shared by ``workers`` runs) and mean CPU seconds."""
    per_gpu = _stats(gpu.values())
    source = "per process" if per_gpu else None
    if per_gpu is None and gpu_rise is not None:
        per_gpu, source = {"max": round(gpu_rise / min(workers, runs), 1)}, "GPUs' rise / runs"
    return {"mode": mode, "k": k, "workers": workers, "runs": runs, "wall_s": round(wall_s, 1),
            "runs_per_hour": round(runs * 3600 / wall_s, 2), "peak_rss_mib": _stats(rss.values()),
            "peak_gpu_mib": per_gpu, "gpu_mib_source": source,
            "cpu_s_per_run": round(sum(cpu_s) / len(cpu_s), 1) if cpu_s else None}


def markdown(report: dict) -> str:
    """The rows as a markdown table, the device and cores above it; speed-up against the
    same mode's K = 1."""
    lines = [f"{report['device']}, {report['cores']} cores; {report['recipe']}, "
             f"{report['steps']} steps a run", "",
             "| mode | K | runs | wall s | runs/hour | vs K = 1 | peak RSS per run (MiB) | "
             "peak GPU per run (MiB) |", "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        one = next((x for x in report["rows"] if x["mode"] == r["mode"] and x["k"] == 1), None)
        speed = f"{r['runs_per_hour'] / one['runs_per_hour']:.2f}x" if one else "-"
        mem = lambda s: f"{s['max']:.0f}" if s else "-"  # noqa: E731
        lines.append(f"| {r['mode']} | {r['k']} | {r['runs']} | {r['wall_s']} | "
                     f"{r['runs_per_hour']} | {speed} | {mem(r['peak_rss_mib'])} | "
                     f"{mem(r['peak_gpu_mib'])} |")
    return "\n".join(lines) + "\n"


def point(args, mode: str, k: int, gpus: int, first_seed: int) -> dict:
    """Train one point's runs through the local executor's worker pool and measure them."""
    from tailtheory.experiments import runs as run_cache

    workers = k * gpus if gpus else k
    configs = run_configs(range(first_seed, first_seed + workers * args.rounds), args.steps,
                          args.device, args.smoke)
    with Sampler(gpu=bool(gpus)) as s:
        base = s.gpu_used()
        t0 = time.perf_counter()
        run_cache._run_workers(configs, workers, lambda cfg: None, gpus)
        wall = time.perf_counter() - t0
    cpu = [run_cache.cpu_seconds(run_cache.runs_root() / run_cache.run_key(c)) for c in configs]
    return row(mode, k, workers, len(configs), wall, s.rss, s.gpu,
               s.gpu_total - base if gpus else None, [c for c in cpu if c is not None])


@contextlib.contextmanager
def mps(folder: Path):
    """An MPS control daemon for the children started inside (its pipes in ``folder``): yields
    ``None`` when it runs, else why it does not; stopped on leaving."""
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        yield "nvidia-cuda-mps-control not found"
        return
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    for d in env.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)                                  # the children connect to it
    started = subprocess.run([exe, "-d"], capture_output=True, text=True, timeout=30)
    try:
        yield None if started.returncode == 0 else (
            f"nvidia-cuda-mps-control -d: exit {started.returncode} {started.stderr.strip()}")
    finally:
        if started.returncode == 0:
            subprocess.run([exe], input="quit\n", text=True, capture_output=True, timeout=60)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def main(argv=None) -> int:
    args = parse(argv)
    os.environ["TAILTHEORY_CACHE"] = cache = tempfile.mkdtemp(prefix="bench_packing-cache-")
    import torch

    from tailtheory.core.provenance import cpu_model, machine
    from tailtheory.engine.load import warm_config
    from tailtheory.engine.start.warm_cache import warm_start
    from tailtheory.experiments.executors import visible_gpus

    gpus = visible_gpus() if args.device == "cuda" else 0
    if args.device == "cuda" and not gpus:
        print("--device cuda: no GPU visible", file=sys.stderr)
        return 2
    if not args.smoke:                                      # copied from weights/, not timed
        warm_start(warm_config(run_configs([0], args.steps, args.device, False)[0]))
    report = {"device": machine(args.device), "cpu": cpu_model(), "cores": os.cpu_count(),
              "gpus": gpus, "torch": torch.__version__, "python": platform.python_version(),
              "recipe": "tiny model, the matched recipe's task (smoke)" if args.smoke else
              "matched (the base rung's GRPO recipe)", "steps": args.steps,
              "rounds": args.rounds, "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%d"), "rows": []}
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_packing-")) / (
        "" if args.out else f"packing-{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    modes = [("plain", contextlib.nullcontext())]
    if gpus and args.mps:
        modes.append(("mps", mps(Path(cache) / "mps")))
    seed = 0
    try:
        for mode, ctx in modes:
            with ctx as why_not:
                if why_not:
                    report["mps"] = f"not measured: {why_not}"
                    continue
                for k in args.ks:
                    report["rows"].append(point(args, mode, k, gpus, seed))
                    seed += report["rows"][-1]["runs"]
                    print(json.dumps(report["rows"][-1]), flush=True)
                    out.write_text(json.dumps(report, indent=1) + "\n")   # a point at a time
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report) + f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
