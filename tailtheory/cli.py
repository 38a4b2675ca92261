"""The ``tailtheory`` command line.

``tailtheory verify [--only ID,ID] [--profile quick|thorough]`` runs the claim checks, prints a
table and writes ``figures/claims.json``; it exits 1 when a check raises or a HOLDS claim fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tailtheory.core.io import figures_dir


def _verify(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from tailtheory.core.registry import PROFILES, run_claim, select
    from tailtheory.core.report import table, write_claims_json

    only = [c.strip() for c in args.only.split(",") if c.strip()] if args.only else None
    if args.profile not in PROFILES:
        raise SystemExit(f"--profile must be one of {PROFILES}")
    claims = select(only)
    results = []
    bar = tqdm(claims, desc="verify", unit="claim", disable=args.quiet, file=sys.stderr)
    for claim in bar:
        bar.set_postfix_str(claim.id)
        results.append(run_claim(claim, args.profile))
    print(table(results))
    out = Path(args.out) if args.out else figures_dir() / "claims.json"
    write_claims_json(results, out, args.profile)
    print(f"\nwrote {out}")
    failed = [r for r in results if r.failed]
    for r in failed:
        print(f"\nFAILED {r.claim.id}: {r.error or f'measured {r.verdict}, ledger {r.claim.expected}'}",
              file=sys.stderr)
        if r.traceback and args.verbose:
            print(r.traceback, file=sys.stderr)
    return 1 if failed else 0


def _train(args: argparse.Namespace) -> int:
    from tailtheory.engine.config import config_from_args
    from tailtheory.engine.trainer import train

    cfg = config_from_args(args)
    run = train(cfg, resume=args.resume, progress=not args.quiet)
    print(f"wrote {run / 'metrics.jsonl'}")
    return 0


def _methods(args: argparse.Namespace) -> int:
    from tailtheory.engine.losses import METHODS, STAGES

    rows = sorted(METHODS.values(), key=lambda m: (STAGES.index(m.stage), m.name))
    width = max(len(m.name) for m in rows)
    for m in rows:
        print(f"{m.name:<{width}}  {m.stage:<10}  {m.summary}  [{m.source}]")
    print("\ncombine with '+', e.g. --method ar+lopti, tis+mis, dr_grpo+trm")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; subcommands register their own options here."""
    p = argparse.ArgumentParser(prog="tailtheory", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="run the claim checks and write figures/claims.json")
    v.add_argument("--only", help="comma-separated claim ids, e.g. M3,T7 (default: all)")
    v.add_argument("--profile", default="quick", help="quick (default) or thorough")
    v.add_argument("--out", help="where to write claims.json (default: figures/claims.json)")
    v.add_argument("--quiet", action="store_true", help="no progress bar")
    v.add_argument("--verbose", action="store_true", help="print tracebacks of failing checks")
    v.set_defaults(func=_verify)
    t = sub.add_parser("train", help="GRPO training with a method spec on a rollout path")
    from tailtheory.engine.config import add_config_arguments
    add_config_arguments(t)
    t.add_argument("--resume", action="store_true", help="continue the run in --out exactly")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=_train)
    m = sub.add_parser("methods", help="list the registered training methods")
    m.set_defaults(func=_methods)
    s = sub.add_parser("sft", help="supervised warm start of a tiny LM on a task (cached)")
    from tailtheory.engine.sft import add_sft_arguments, sft_main
    add_sft_arguments(s)
    s.set_defaults(func=sft_main)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tailtheory`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:  # bad input: one clear line, no traceback
        print(f"tailtheory: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
