"""The cost of ``tailtheory probe mismatch --attribute`` on a model of Qwen2.5-0.5B's shape.

What it measures: models of Qwen2.5-0.5B's configuration (``bench_any_model.QWEN25_05B``: hidden
896, 14 query and 2 key-value heads, MLP 4,864, tied embeddings, V = 151,936 rows; random
weights in float32, saved beside a BPE tokenizer trained here) with ``--layers`` decoder layers
each (24 is the real model), and for each the whole command ``tailtheory probe mismatch
--attribute --batch B --length L`` in a fresh process: its wall time, peak memory and each arm's
seconds (the table's ``seconds`` column). The command's cost is ``a + b * layers`` (the layers'
forwards grow with the layers; the LM heads, the statistics over the vocabulary and the
loading do not), so with two or more sizes measured the script fits that line and writes its
value at 24 layers: an extrapolation, labelled as one, beside the sizes measured. On a shared
machine the per-arm seconds of small sizes are too noisy to extrapolate one by one (a negative
slope is common); measure the full depth where it fits (``--layers 24``: minutes on one core).

Results go to ``benchmarks/results/attribute_<device>.json`` with the CPU, the threads and the
commands. Run (one thread, as the docs' numbers):
``HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_attribute.py --layers 2 4``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_any_model import QWEN25_05B, RESULTS, build_checkpoint, run_command  # noqa: E402

FULL_LAYERS = QWEN25_05B["num_hidden_layers"]


def fit(layers: list[int], seconds: list[float]) -> dict:
    """Least-squares ``seconds = a + b * layers`` and its value at :data:`FULL_LAYERS`."""
    n = len(layers)
    mx, my = sum(layers) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in layers)
    b = sum((x - mx) * (y - my) for x, y in zip(layers, seconds)) / sxx
    a = my - b * mx
    return {"a_s": a, "b_s_per_layer": b, "at_full_layers_s": a + b * FULL_LAYERS}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--tokenizer-vocab", type=int, default=8192)
    p.add_argument("--with", dest="earlier", nargs="*", default=[],
                   help="result files of earlier runs (same machine) whose sizes join the fit")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = p.parse_args(argv)

    import torch

    from tailtheory.core.provenance import cpu_model

    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else None
    report = {"device": gpu or "cpu", "cpu": cpu_model(), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "python": platform.python_version(),
              "shape": "Qwen2.5-0.5B but the layers", "positions": [args.batch, args.length],
              "sizes": [], "earlier": [json.loads(Path(f).read_text()) for f in args.earlier]}
    for n in args.layers:
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = Path(tmp) / "model"
            facts = build_checkpoint(ckpt, dict(QWEN25_05B, num_hidden_layers=n),
                                     args.tokenizer_vocab)
            out = Path(tmp) / "out"
            res = run_command(["probe", "mismatch", "--attribute", "--model", str(ckpt),
                               "--device", args.device, "--batch", str(args.batch),
                               "--length", str(args.length), "--out", str(out)])
            rec = json.loads((out / "probe_mismatch_attribute.json").read_text())
        arms = {r["arm"]: r["seconds"] for r in rec["result"]["table"] if r["arm"] != "residual"}
        report["sizes"].append({"layers": n, **facts, **res, "arm_seconds": arms})
        print(json.dumps(report["sizes"][-1]), flush=True)
    sizes = [s for r in report["earlier"] for s in r["sizes"]] + report["sizes"]
    xs = [s["layers"] for s in sizes if s.get("rc") == 0]
    if len(set(xs)) >= 2 and FULL_LAYERS not in xs:
        report["extrapolated_to_full_layers"] = {
            "note": f"a line a + b * layers through the sizes measured ({xs}), read at "
                    f"{FULL_LAYERS} layers: an extrapolation, not a measurement",
            "command_s": fit(xs, [s["seconds"] for s in sizes if s.get("rc") == 0])}
    name = (gpu or "cpu").replace(" ", "_")
    path = Path(args.out) if args.out else RESULTS / f"attribute_{name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
