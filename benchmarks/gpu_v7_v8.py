"""V7 and V8 on a GPU's kernels, for the named models whose weights are kept here: one prepared
run of at most 6 minutes, whose rows name the GPU.

On a CPU, V7's same-dtype setting compares two CPU kernels of one dtype (the model's forward and
the engine's), and V8's batch shapes move CPU reductions; the papers' numbers come from GPU
kernels. This script measures both on the device, with the rules of the CPU stores:

- **V7** under ``v7_units`` (:data:`tailtheory.ladder.mismatch.V7_RULES`: 256 prompts, bounds
  settled to a Monte Carlo sd of 0.05) on each committed model (``results/ladder_models.json``,
  ``weights/``);
- **V8** on each of those models' corpus LMs found in the run cache (``cache/corpus_lm/KEY``;
  carry it to the device with the tree), the store's windows and batch shapes.

Rows go to ``<out-dir>/v7_units_<GPU>.json`` and ``<out-dir>/v8_models_<GPU>.json`` (label ->
row, as the CPU stores hold them, each naming the model's fingerprint and the machine), written
after each model, so a run stopped by its time limit keeps what finished. They are a device's
rows: never pooled with the CPU's (V7's verdict is per machine; a trend never mixes devices).

    python benchmarks/gpu_v7_v8.py --device cuda --out-dir DIR   # the GPU
    python benchmarks/gpu_v7_v8.py --smoke                       # the whole script on the CPU

``--smoke``: 16 prompts and the base model only, on the CPU, into a temporary folder (about a
minute); it checks the script, not a number.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

DEADLINE_S = 330
"""Seconds after which no new model is started (the run's budget is 6 minutes)."""


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto (cuda when present), cuda or cpu "
                   "(default: auto)")
    p.add_argument("--out-dir", default=None, help="where the rows go (default: a temporary "
                   "folder, printed)")
    p.add_argument("--smoke", action="store_true", help="16 prompts, the base model, the CPU")
    args = p.parse_args(argv)

    import torch

    from tailtheory.core.provenance import machine, weights_fingerprint
    from tailtheory.engine.start.corpus_lm import (RECORD, heldout_stream, load_corpus_lm)
    from tailtheory.engine.start.corpus_lm import cache_root as corpus_root
    from tailtheory.ladder import models
    from tailtheory.ladder.mismatch import (SHAPE_WINDOWS, V7_RULES, model_verdict,
                                            settled_interval)
    from tailtheory.mismatch.batch_shape import batch_shape_mismatch, ragged_windows
    from tailtheory.tim.precision import precision_mismatch

    device = "cpu" if args.smoke else args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out_dir or tempfile.mkdtemp(prefix="gpu_v7_v8-"))
    out.mkdir(parents=True, exist_ok=True)
    where = machine(device)
    tag = where.replace(" ", "_").replace("(", "").replace(")", "")
    spec = V7_RULES["v7_units"]
    n_prompts = 16 if args.smoke else spec["n_prompts"]
    names = [k for k, v in models.read().items() if models.state(v) == "committed"]
    names = names[:1] if args.smoke else names
    v7_path, v8_path = out / f"v7_units_{tag}.json", out / f"v8_models_{tag}.json"
    v7, v8, t0 = {}, {}, time.perf_counter()
    print(f"{len(names)} committed models on {where}; rows into {out}", flush=True)
    for name in names:
        if time.perf_counter() - t0 > DEADLINE_S:
            print(f"deadline: {name} not started", flush=True)
            break
        row = models.read()[name]
        try:
            t = time.perf_counter()
            model, task, _ = models.load(name, device=device)
            got = precision_mismatch(model, task, n_prompts, per_response=True)
            for x in got["settings"].values():
                x.update(settled_interval(x["sums"]["bf16"], x["sums"]["fp16"], spec["mc_sd"],
                                          spec["n_boot"]))
            v7[name] = {**got, "model": name, "weights": row["warm"]["weights"],
                        "machine": where, "rung": row["rung"], "build": row["build"],
                        "non_embedding_params": row["non_embedding_params"], "rule": "v7_units",
                        "n_prompts": n_prompts, "seconds": round(time.perf_counter() - t, 1),
                        "verdict": model_verdict({k: (v["ratio"], v["low"], v["high"])
                                                  for k, v in got["settings"].items()})}
            _write(v7_path, v7)
            print(f"V7 {name}: " + ", ".join(
                f"{k} {v['ratio']:.1f} [{v['low']:.1f}, {v['high']:.1f}]"
                for k, v in got["settings"].items()) + f" ({v7[name]['seconds']} s)", flush=True)
        except Exception:                                   # noqa: BLE001 (kept, go on)
            v7[name] = {"model": name, "machine": where, "error": traceback.format_exc()}
            _write(v7_path, v7)
            print(f"V7 {name} failed:\n{v7[name]['error']}", flush=True)
        c = row.get("corpus")
        folder = corpus_root() / c["key"] if c else None
        if folder is None or not (folder / RECORD).exists():
            print(f"V8 {name}: its corpus LM is not in this cache (carry cache/corpus_lm/KEY)",
                  flush=True)
            continue
        try:
            t = time.perf_counter()
            lm, tok = load_corpus_lm(folder, device=device)
            if weights_fingerprint(lm.float()) != c["weights"]:
                raise ValueError(f"{folder} is not {name}'s corpus LM")
            seqs = ragged_windows(heldout_stream(folder), **SHAPE_WINDOWS)
            rows = batch_shape_mismatch(lm.float().eval(), seqs, pad_id=tok.pad_token_id)
            v8[name] = {"rows": rows, "model": name, "corpus_weights": c["weights"],
                        "machine": where, "seconds": round(time.perf_counter() - t, 1)}
            _write(v8_path, v8)
            print(f"V8 {name}: {len(rows)} rows ({v8[name]['seconds']} s)", flush=True)
        except Exception:                                   # noqa: BLE001
            v8[name] = {"model": name, "machine": where, "error": traceback.format_exc()}
            _write(v8_path, v8)
            print(f"V8 {name} failed:\n{v8[name]['error']}", flush=True)
    errors = [k for d in (v7, v8) for k, v in d.items() if "error" in v]
    print(f"done in {time.perf_counter() - t0:.0f} s; {len(errors)} failed", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
