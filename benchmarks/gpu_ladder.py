"""The model-size ladder on a GPU: timings and a smoke check in one prepared run of at most 8
minutes. No verdict number comes from it, and nothing in the toolkit depends on it.

Three phases, each in its own process under its own time limit, so that one failing or slow
phase costs only its own share:

1. ``probes``: at each rung of :data:`PROBE_RUNGS`, a model of that rung's architecture
   (:mod:`tailtheory.engine.start.rungs`) with random weights, speaking the committed ``base``
   warm start's tokenizer and ``kk_prose`` task, on the device; the size effects' three parts
   (:mod:`tailtheory.ladder.effects`: ``tail``, ``p4``, and ``lopti`` on one GRPO batch) timed. Random
   weights answer how long a part takes at that width, not what it measures there.
2. ``steps``: ``benchmarks/bench_step.py --workload rung`` at each rung of :data:`STEP_RUNGS`, the
   engine's micro-batch step beside TRL's on the same workload (its own report,
   ``step_rung_<rung>_<GPU>.json``).
3. ``notebooks``: notebooks 04 and 05 run as scripts with ``MODEL`` the committed ``base`` warm
   start (a local checkpoint with its tokenizer) and ``DEVICE = "cuda"`` (``cpu`` under
   ``--smoke``): their checkpoint probes on the GPU; each one's seconds and output's tail stored.

Report: ``<out-dir>/ladder_gpu_<GPU>.json``, rewritten as each phase ends. The package must be
installed (its claims are entry points) with TRL beside it (``pip install -e '.[dev]'``).

    python benchmarks/gpu_ladder.py --device cuda --out-dir DIR   # 5.5 min on an H200
    python benchmarks/gpu_ladder.py --smoke                        # the whole script on the CPU

``--smoke`` runs the two notebooks here, on the CPU, and like any run of them they rewrite their
figures under ``figures/``. Measured (``benchmarks/results/ladder_gpu_NVIDIA_H200.json`` and
``docs/benchmarks.md``): the parts 15-19 s (``tail``), 9-13 s (``lopti``) and 25-36 s (``p4``)
a rung, the step 1.13 s at ``w384`` and 1.36 s at ``w448`` (1.40x and 1.58x TRL's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARM = ROOT / "weights" / "base"
"""The committed ``base`` warm start: the tokenizer and task of every probe, notebooks' MODEL (the
measurements of docs/benchmarks.md ran with the ``w192`` warm start, committed then; the rungs
share one tokenizer and task)."""
PROBE_RUNGS = ("w256", "w448")
STEP_RUNGS = ("w384", "w448")
NOTEBOOKS = ("04_gradient_dominance", "05_pruning_in_training")
LIMITS = {"probes": 90, "steps": 95, "notebooks": 55}
"""Seconds allowed to each child process of a phase (one per rung or notebook): 2 x 90 + 2 x 95
+ 2 x 55 = 480 s at most, 8 minutes. On an H200 a rung's three parts took 49 s (``w256``) and
68 s (``w448``) with the model's load besides, a ``w384`` step 70 s (80 s was too short), the
notebooks 36 and 29 s. ``--smoke`` probes one rung at width 64 with 400 s (the CPU takes about
105 s for ``tail`` and 270 s for ``p4`` there)."""


def gpu_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name().replace(" ", "_") if device == "cuda" else "cpu"


def probe_model(name: str, device: str, smoke: bool):
    """``(model, task)``: rung ``name``'s architecture with random weights (``smoke``: width 64, 2
    layers), speaking the committed warm start's tokenizer and task, on ``device``."""
    from dataclasses import replace

    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.start.rungs import rung
    from tailtheory.engine.start.warm_cache import load_warm_start

    _, task = load_warm_start(WARM, device="cpu")
    cfg = rung(name).model
    if smoke:
        cfg = replace(cfg, hidden=64, layers=2, heads=2, kv_heads=1)
    return tiny_lm(cfg, seed=0).to(device).eval(), task


def probe_rung(name: str, device: str, smoke: bool, dest: Path) -> dict:
    """The three parts' seconds at rung ``name`` (each part's error, if any, in its place),
    written to ``dest`` after each part (a child stopped by its limit keeps the parts done)."""
    from dataclasses import replace

    import torch

    from tailtheory.core.models import num_params
    from tailtheory.experiments.policies import grpo_config
    from tailtheory.ladder import effects as size

    model, task = probe_model(name, device, smoke)
    row = {"params": num_params(model), "parts": {}}
    cfg = replace(grpo_config("matched"), device=device)
    if smoke:
        cfg = replace(cfg, prompts_per_step=2, group_size=4)
    parts = {"tail": lambda: size.tail_numbers(model, task, 1),
             "lopti": lambda: size.lopti_numbers(model, task, 1, batches=1, cfg=cfg),
             "p4": lambda: size.p4_numbers(model, task, 1)}
    for part, fn in parts.items():
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        try:
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            row["parts"][part] = {"seconds": time.perf_counter() - t}
        except Exception as e:  # a part that fails on this device: recorded, the others go on
            row["parts"][part] = {"error": f"{type(e).__name__}: {e}",
                                  "trace": traceback.format_exc()[-1500:]}
        if device == "cuda":
            row["peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
        dest.write_text(json.dumps(row))
    return row


def notebook_script(stem: str, device: str) -> str:
    """Notebook ``stem``'s percent-format script with its parameters cell set to the committed
    warm start as ``MODEL`` and ``device`` as ``DEVICE`` (an error if either line is missing)."""
    text = (ROOT / "notebooks" / f"{stem}.py").read_text()
    for old, new in (("MODEL = None\n", f"MODEL = {str(WARM)!r}\n"),
                     ('DEVICE = "auto"\n', f"DEVICE = {device!r}\n")):
        if text.count(old) != 1:
            raise ValueError(f"notebooks/{stem}.py: the parameters line {old.strip()!r} is not "
                             "there exactly once")
        text = text.replace(old, new)
    return text


def child(cmd: list[str], limit: int, cwd: Path, env: dict) -> dict:
    """Run ``cmd`` under ``limit`` seconds: its return code, seconds and output's tail."""
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=limit)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        text = "".join(x.decode() if isinstance(x, bytes) else (x or "")
                       for x in (e.stdout, e.stderr))
    return {"rc": rc, "seconds": time.perf_counter() - t, "tail": text[-2500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--smoke", action="store_true",
                        help="tiny widths on the CPU, a temporary report: checks the script")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--probe", help=argparse.SUPPRESS)        # a child: one rung's probes
    parser.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tailtheory.engine.devices import resolve_device

    device = "cpu" if args.smoke else resolve_device(args.device)
    if args.probe:
        probe_rung(args.probe, device, args.smoke, args.probe_out)
        return
    if args.smoke:
        args.out_dir = Path(tempfile.mkdtemp(prefix="gpu_ladder_"))
    import torch

    name = gpu_name(device)
    out = args.out_dir / f"ladder_gpu_{name}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
        "MPLBACKEND": "Agg", "TAILTHEORY_PRESET": "quick"}
    report = {"device": name, "torch": torch.__version__, "smoke": args.smoke,
              "command": " ".join(["python benchmarks/gpu_ladder.py", *sys.argv[1:]]),
              "limits_s": LIMITS, "probes": {}, "steps": {}, "notebooks": {}}

    def save() -> None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] saved {out}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        for r in PROBE_RUNGS[:1] if args.smoke else PROBE_RUNGS:
            dest = Path(tmp) / f"probe_{r}.json"
            cmd = [sys.executable, __file__, "--probe", r, "--probe-out", str(dest),
                   "--device", device] + (["--smoke"] if args.smoke else [])
            run = child(cmd, 400 if args.smoke else LIMITS["probes"], ROOT, env)
            report["probes"][r] = {**run, **(json.loads(dest.read_text()) if dest.exists()
                                              else {})}
            print(r, "probes", {k: v.get("seconds", v.get("error"))
                                for k, v in report["probes"][r].get("parts", {}).items()},
                  run["rc"], flush=True)
            save()
        for r in STEP_RUNGS:
            cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_step.py"), "--workload",
                   "rung", "--rung", r, "--contenders", "b_micro_kv,c_trl"]
            cmd += ["--smoke"] if args.smoke else ["--device", device]
            report["steps"][r] = child(cmd, LIMITS["steps"], ROOT, env)
            print(r, "step", report["steps"][r]["rc"], f"{report['steps'][r]['seconds']:.0f} s",
                  flush=True)
            save()
        for stem in NOTEBOOKS:
            script = Path(tmp) / f"{stem}.py"
            script.write_text(notebook_script(stem, device))
            report["notebooks"][stem] = child([sys.executable, str(script)],
                                              LIMITS["notebooks"], ROOT / "notebooks", env)
            print(stem, report["notebooks"][stem]["rc"],
                  f"{report['notebooks'][stem]['seconds']:.0f} s", flush=True)
            save()


if __name__ == "__main__":
    main()
