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
    p.add_argument("--model", default=None,
                   help="a local Hugging Face checkpoint folder (save_pretrained) holding its "
                        "tokenizer (decisiveness: or --recipe)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--batch", type=int, default=8, help="text windows")
    p.add_argument("--length", type=int, default=512, help="tokens a window")
    p.add_argument("--seed", type=int, default=0, help="chooses the windows")
    a = p.add_argument_group("mismatch --attribute (the mismatch of each knob, one at a time)")
    a.add_argument("--attribute", action="store_true",
                   help="bf16, fp16, KV cache, batch 8 and 32, attention kernel, and bf16 + KV + "
                        "batch 32 + that kernel together, each against the float32 full "
                        "forward, batch 1, eager attention")
    a.add_argument("--attention", default=None,
                   help="the attention arm's kernel (default sdpa; needs --attribute)")
    d = p.add_argument_group("decisiveness (which low-probability tokens decide the answer)")
    d.add_argument("--recipe", default=None, help="probe a recipe's policy instead of --model")
    d.add_argument("--policy", default="warm", help="warm (the warm start) or mid (GRPO step 60)")
    d.add_argument("--task", default="kk_trace", help="the task --model was trained on")
    d.add_argument("--n-people", type=int, default=2, help="Knights-and-Knaves people")
    d.add_argument("--K", type=int, default=None, help="rollouts a branch (default: calibrated)")
    d.add_argument("--prompts", type=int, default=8, help="prompts probed (8 responses each)")
    d.add_argument("--others", type=int, default=96, help="tokens probed above the lowest bin")
    d.add_argument("--sampler", default="coupled",
                   help="the branches' pairing: coupled (Gumbel-max noise shared by word and "
                        "piece) or inverse_cdf (by position, as the stored measurements)")
    p.add_argument("--out", default=None,
                   help="output folder (default: probe_FAMILY in the current folder)")


def _fmt(x) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def probe_main(args: argparse.Namespace) -> int:
    """Check the arguments and the output folder, run the probe, write, print the summary."""
    from tailtheory.core.display import quiet_transformers
    from tailtheory.probe.run import ProbeConfig, check_attribute, check_out_dir, run_probe

    quiet_transformers()
    check_attribute(args.family, args.attribute)
    if args.family == "decisiveness":
        return _decisiveness(args)
    if args.model is None:
        raise ValueError(f"the {args.family} probe needs --model PATH (a checkpoint folder)")
    config = ProbeConfig(args.family, args.model, args.device, args.batch, args.length,
                         args.seed, args.attribute, args.attention)
    out = check_out_dir(args.out or f"probe_{config.output}", config.output)  # before any work
    res = run_probe(config)
    return _report(res, out)


def _report(res, out) -> int:
    from tailtheory.probe.run import write_result

    config = res.config
    written = write_result(res, out)
    what = config.model or f"recipe {config.recipe} ({config.policy})"
    print(f"{config.output} probe of {what} on {res.device}: {res.text}; "
          f"{res.seconds:.1f} s")
    cols = [c for c in res.summary.columns if c != "note" or res.summary[c].astype(bool).any()]
    print(res.summary[cols].to_string(index=False, float_format=_fmt))
    print(f"wrote {len(written)} files into {out}/: {', '.join(p.name for p in written)}")
    return 0


def _decisiveness(args: argparse.Namespace) -> int:
    from tailtheory.probe.decisive import DecisiveConfig, run_decisiveness
    from tailtheory.probe.run import check_out_dir

    extra = {} if args.K is None else {"K": args.K}
    config = DecisiveConfig(args.model, args.recipe, args.policy, args.task, args.n_people,
                            args.device, prompts=args.prompts, others=args.others,
                            seed=args.seed, sampler=args.sampler, **extra)
    out = check_out_dir(args.out or "probe_decisiveness", config.output)  # before any work
    return _report(run_decisiveness(config), out)
