"""``tailtheory probe mismatch|pruning|gradient --model PATH``: a probe family on a checkpoint,
its figures and tables written into ``--out`` and its summary printed (package docstring)."""

from __future__ import annotations

import argparse

PROBE_EPILOG = """output folder (--out): new, or one a probe wrote before. A file there of a name
the probe writes is replaced only when the probe's record (probe_FAMILY.json) holds its
SHA-256; any other file of that name is refused before any work. Memory: positions are taken a chunk at
a time and the gradient probe uses the fused LM head, so no (batch, length, vocabulary) tensor
is ever formed."""


def add_probe_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``tailtheory probe``."""
    from tailtheory.probe.run import FAMILIES

    p.add_argument("family", help=f"which probe: {', '.join(FAMILIES)}")
    p.add_argument("--model", required=True,
                   help="a local Hugging Face checkpoint folder (save_pretrained) holding its "
                        "tokenizer")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--batch", type=int, default=8, help="text windows")
    p.add_argument("--length", type=int, default=512, help="tokens a window")
    p.add_argument("--seed", type=int, default=0, help="chooses the windows")
    p.add_argument("--out", default=None,
                   help="output folder (default: probe_FAMILY in the current folder)")


def _fmt(x) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def probe_main(args: argparse.Namespace) -> int:
    """Check the arguments and the output folder, run the probe, write, print the summary."""
    from tailtheory.core.display import quiet_transformers
    from tailtheory.probe.run import ProbeConfig, check_out_dir, run_probe, write_result

    quiet_transformers()
    config = ProbeConfig(args.family, args.model, args.device, args.batch, args.length,
                         args.seed)
    out = check_out_dir(args.out or f"probe_{config.family}", config.family)  # before any work
    res = run_probe(config)
    written = write_result(res, out)
    print(f"{config.family} probe of {config.model} on {res.device}: {res.text}; "
          f"{res.seconds:.1f} s")
    cols = [c for c in res.summary.columns if c != "note" or res.summary[c].astype(bool).any()]
    print(res.summary[cols].to_string(index=False, float_format=_fmt))
    print(f"wrote {len(written)} files into {out}/: {', '.join(p.name for p in written)}")
    return 0
