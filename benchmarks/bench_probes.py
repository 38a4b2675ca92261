"""Each ``tailtheory probe`` family at Qwen's vocabulary: peak memory and time.

The model: a random Qwen2-style LM with V = 151,936 rows and ``--layers`` narrow layers (width
``--hidden``), saved with ``save_pretrained`` beside a byte-level BPE tokenizer of 4,096 ids
trained here on the standard library's source (the corpus LM's recipe); nothing is downloaded.
Each probe runs through the command (``tailtheory.cli.main``) at ``--batch`` x ``--length``
positions (default 8 x 512) on ``--device`` (``auto``: a GPU when one is visible), each in a
fresh subprocess:

- on a GPU the peak is ``torch.cuda.max_memory_allocated`` over the probe;
- on a CPU the peak is the process's max resident set (``resource.getrusage``), which only
  grows, so a separate subprocess measures the baseline: the same imports, the checkpoint
  loaded and the text windows read, no probe. ``extra_mib`` = probe peak - baseline peak.

For scale, one float64 ``(B, T, V)`` tensor (what ``paired_logits`` returns per side) is
``B T V x 8`` bytes: 4.6 GiB at 8 x 512. Results go to ``benchmarks/results/probes_<device>.json``
with the device, the CPU, torch's version and the thread count.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_probes.py [--batch 8 --length 512]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
QWEN_VOCAB = 151_936
FAMILIES = ("mismatch", "pruning", "gradient")

CHILD = r"""
import json, resource, sys, time
import torch
import tailtheory.cli
from tailtheory.probe.run import ProbeConfig, load_checkpoint
argv = json.loads(sys.argv[1])
cuda = argv[argv.index("--device") + 1] == "cuda"
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out = {"rss_imports_mib": rss()}
if cuda:
    torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
if argv[0] == "baseline":
    cfg = ProbeConfig("mismatch", argv[argv.index("--model") + 1], argv[argv.index("--device") + 1],
                      int(argv[argv.index("--batch") + 1]), int(argv[argv.index("--length") + 1]))
    load_checkpoint(cfg)
    rc = 0
else:
    rc = tailtheory.cli.main(argv)
out.update(rc=rc, seconds=time.perf_counter() - t0, peak_rss_mib=rss())
if cuda:
    torch.cuda.synchronize()
    out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
print("RESULT " + json.dumps(out))
"""


def build_checkpoint(path: Path, hidden: int, layers: int, length: int) -> dict:
    """A random Qwen2 LM at Qwen's vocabulary and a 4,096-id BPE, saved to ``path``."""
    from tailtheory.core.models import num_params, tiny_lm
    from tailtheory.engine.start.corpus_lm import CorpusLMConfig, corpus_files, train_tokenizer

    t0 = time.perf_counter()
    files, _ = corpus_files(CorpusLMConfig(corpus_bytes=1_000_000))
    tok = train_tokenizer([f.read_text(encoding="utf-8") for f in files], 4096)
    model = tiny_lm(vocab_size=QWEN_VOCAB, hidden=hidden, layers=layers, heads=2, kv_heads=1,
                    max_positions=max(length, 256), seed=0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return {"vocab_rows": QWEN_VOCAB, "hidden": hidden, "layers": layers,
            "params": num_params(model), "tokenizer_ids": len(tok),
            "build_s": round(time.perf_counter() - t0, 1)}


def run_child(argv: list[str]) -> dict:
    """``argv`` (a ``tailtheory`` command, or ``baseline ...``) in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv)], capture_output=True,
                          text=True, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    res = json.loads(lines[-1][7:]) if lines else {"rc": proc.returncode}
    if res.get("rc") != 0:
        res["stderr_tail"] = proc.stderr[-2000:]
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--only", default=",".join(FAMILIES), help="comma-separated probe families")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = p.parse_args(argv)

    import torch

    from tailtheory.core.provenance import cpu_model
    from tailtheory.engine.devices import resolve_device

    device = resolve_device(args.device)
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    B, L = args.batch, args.length
    report = {"device": gpu or "cpu", "cpu": cpu_model(), "torch": torch.__version__,
              "python": platform.python_version(), "threads": torch.get_num_threads(),
              "positions": [B, L],
              "f64_BTV_mib": B * L * QWEN_VOCAB * 8 / 2**20,
              "memory": ("torch.cuda.max_memory_allocated over the probe" if gpu else
                         "max RSS of the probe's process minus that of a baseline process "
                         "(imports, checkpoint loaded, text windows read)")}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "model"
        report["model"] = build_checkpoint(ckpt, args.hidden, args.layers, L)
        print(f"model: {report['model']}", flush=True)
        common = ["--model", str(ckpt), "--device", device, "--batch", str(B), "--length",
                  str(L)]
        report["baseline"] = base = run_child(["baseline", *common])
        print(f"baseline: {base}", flush=True)
        report["probes"] = {}
        for name in [f for f in args.only.split(",") if f]:
            res = run_child(["probe", name, *common, "--out", str(Path(tmp) / name)])
            if "peak_rss_mib" in res and "peak_rss_mib" in base:
                res["extra_rss_mib"] = res["peak_rss_mib"] - base["peak_rss_mib"]
            report["probes"][name] = res
            print(f"probe {name}: {res}", flush=True)
    tag = "cpu" if gpu is None else gpu.replace(" ", "_")
    size = "" if (B, L) == (8, 512) else f"_{B}x{L}"
    out = Path(args.out) if args.out else RESULTS / f"probes_{tag}{size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if all(r.get("rc") == 0 for r in report["probes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
