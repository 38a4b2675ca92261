"""The ``tailtheory`` command line: check the claims, warm-start a tiny model, train it with GRPO.

``tailtheory verify [--only ID,ID] [--profile quick|thorough]`` runs the claim checks, prints a
table (with timings) and writes ``claims.json`` (without them: the same code gives the same file
on one CPU kind) where ``make repro`` writes, the ignored ``build/repro/`` (or ``--out``); the
committed ``figures/claims.json`` changes only through ``make figures``; it exits 1 when a check raises or a HOLDS claim fails. Bad input
anywhere is one line on stderr and exit status 2; Ctrl-C is exit status 130, with the command
that continues a run.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from tailtheory.experiments.cluster import add_cluster_arguments, check_executor, cluster_options
from tailtheory.ladder.cli import ladder, ladder_arguments
from tailtheory.probe.cli import PROBE_EPILOG


def _verify(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from tailtheory.core.io import check_out_file, repro_dir
    from tailtheory.core.registry import PROFILES, run_claim, select
    from tailtheory.core.report import is_claims_json, table, write_claims_json
    from tailtheory.engine.threads import torch_threads

    only = [c.strip() for c in args.only.split(",") if c.strip()] if args.only else None
    if args.profile not in PROFILES:
        raise SystemExit(f"--profile must be one of {PROFILES}")
    claims = select(only)
    out = check_out_file(args.out or repro_dir() / "claims.json", is_claims_json)  # before work
    results = []
    bar = tqdm(claims, desc="verify", unit="claim", disable=args.quiet, file=sys.stderr)
    # One thread: reductions run in one order whatever the core count, so the same code writes
    # the same claims.json on any machine of the same CPU kind (and tiny checks run faster).
    with torch_threads(1):
        for claim in bar:
            bar.set_postfix_str(claim.id)
            results.append(run_claim(claim, args.profile))
    print(table(results))
    if only is None:
        from tailtheory.ladder.report import size_report

        print("\n" + size_report())
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

    if args.recipe == "list":
        from tailtheory.experiments.recipes import describe

        print(describe())
        return 0
    if args.recipe:
        from tailtheory.experiments.recipes import recipe_config

        cfg = recipe_config(args.recipe, **{k: getattr(args, k) for k in args.explicit})
    else:
        cfg = config_from_args(args)
    run = train(cfg, resume=args.resume, progress=not args.quiet)
    print(f"wrote {run / 'metrics.jsonl'}")
    return 0


def _methods(args: argparse.Namespace) -> int:
    from tailtheory.engine.registry import STAGES, registered

    rows = sorted(registered().values(), key=lambda m: (STAGES.index(m.stage), m.name))
    width = max(len(m.name) for m in rows)
    for m in rows:
        print(f"{m.name:<{width}}  {m.stage:<10}  {m.summary}  [{m.source}]")
    print("\ncombine with '+', e.g. --method ar+lopti, tis+mis, dr_grpo+trm")
    return 0


def _study(args: argparse.Namespace) -> int:
    from tailtheory.experiments.study import get_study, studies

    if args.name == "list":
        for name, st in sorted(studies().items()):
            print(f"{name}: {len(st.plan(st.measure_preset))} arms on the {st.measure_preset} "
                  f"preset, stored in results/{name}.json; regenerate: {st.command}")
        return 0
    st = get_study(args.name)
    preset = args.preset or st.measure_preset
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    status = _study_status(st, preset)
    if args.dry_run:
        executor = check_executor(getattr(args, "executor", "local"))
        if executor != "local" or getattr(args, "device", None):
            from tailtheory.experiments.executors import plan_text

            print(plan_text(st, preset, executor, args.workers, cluster_options(args)))
        return 0
    if args.store_done:
        from tailtheory.experiments.incremental import store_done

        stored = store_done(st, preset)
        print(f"stored {sum(stored.values())} runs in results/{st.name}.json "
              f"({', '.join(f'{k}: {v}' for k, v in stored.items()) or 'none finished'})")
        return 0
    _study_train(st, preset, args)
    return 0


def _study_status(st, preset: str) -> dict:
    """Print, per arm and in all, the runs stored in ``results/NAME.json``, cached and to train;
    returns :meth:`~tailtheory.experiments.study.Study.status`."""
    status = st.status(preset)
    n = {k: sum(len(s[k]) for s in status.values()) for k in ("stored", "cached", "train")}
    for label, s in status.items():
        print(f"{label}: {len(s['stored'])} stored, {len(s['cached'])} cached, "
              f"{len(s['train'])} to train")
    print(f"{sum(n.values())} runs on the {preset} preset: {n['stored']} stored in "
          f"results/{st.name}.json, {n['cached']} cached in the run cache, {n['train']} to train")
    return status


def _study_train(st, preset: str, args: argparse.Namespace) -> None:
    """Train the runs the study lacks on ``--executor``, seed by seed across the arms (a sweep
    stopped part-way holds the same seeds of every arm), and on the stored preset store each run
    as it finishes (:func:`~tailtheory.experiments.executors.run_study`)."""
    from tailtheory.experiments.executors import run_study

    executor = check_executor(getattr(args, "executor", "local"))
    if preset != st.measure_preset and executor == "local":
        st.measure(preset, workers=args.workers)
        print(f"measured the {preset} preset's runs (not stored: the stored measurement is the "
              f"{st.measure_preset} preset's)")
        return
    from tailtheory.experiments.incremental import stored_record

    run_study(st, preset, executor, args.workers, cluster_options(args))
    rows = stored_record(st.name).get("data", {}).values()
    print(f"stored {sum(len(r) for r in rows)} runs in results/{st.name}.json")


UNRECORDED_LEGEND = ("models / machines `unrecorded`: rows that name no model or no machine; a "
                     "verdict resting on them reads PENDING until `tailtheory measure NAME` "
                     "measures them again on a named model")  # under `measure list`'s table


def _measure(args: argparse.Namespace) -> int:
    from tailtheory.experiments import measures as ms
    from tailtheory.experiments.study import Study

    if args.name == "list":
        print(ms.table(ms.listing()))
        print(f"\n{UNRECORDED_LEGEND}")
        return 0
    if args.name == "stale":
        return _measure_stale(ms.staleness())
    entry = ms.get(args.name)
    if isinstance(entry, Study):
        print(f"{entry.name}: a study; `{entry.command}` trains what the run cache lacks and "
              f"stores each run as it finishes (resumes)")
        return _study(argparse.Namespace(name=entry.name, preset=None, workers=2,
                                         dry_run=args.dry_run, store_done=False))
    print(entry.plan(), flush=True)
    if args.dry_run:
        return 0
    if entry.remake is None:
        raise ValueError(f"{entry.name} is not made again ({entry.path} is kept as recorded)")
    entry.remake()
    print(f"stored {entry.path}")
    return 0


def _measure_stale(rows: list[dict]) -> int:
    """Print the stores that are not current; exit status 2 when one cannot be read, 1 when one
    is stale or missing, else 0."""
    for r in rows:
        if r["state"] == "stale":
            print(f"{r['name']}: stale (stored fingerprint {r['stored']}, today's {r['today']}); "
                  f"make it again: {r['command']}")
        elif r["state"] != "current":
            print(f"{r['name']}: {r['state']} ({r['detail']}); make it: {r['command']}")
    states = {r["state"] for r in rows}
    print(f"{sum(r['state'] == 'current' for r in rows)} of {len(rows)} stores current")
    return 2 if "unreadable" in states else 1 if states & {"stale", "missing"} else 0


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, unless the help states it or there is none to show."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "(default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


TRAIN_EPILOG = """run directory (--out): a new or empty directory, or a tailtheory run (marked by the file
.tailtheory-run). A folder of anything else is refused and left untouched; a run that already
holds output is continued with --resume, never overwritten; one process writes a run at a time.
Ctrl-C stops a run and prints the command that continues it."""


def version() -> str:
    """The installed package's version, else ``tailtheory.__version__``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("tailtheory")
    except PackageNotFoundError:
        from tailtheory import __version__

        return __version__


def _command(sub, name: str, func, help: str, description: str = "", add=None, **kw):
    """Add subcommand ``name`` running ``func``; ``add(parser)`` registers its options."""
    p = sub.add_parser(name, help=help, description=description or None,
                       formatter_class=_HelpFormatter, **kw)
    if add is not None:
        add(p)
    p.set_defaults(func=func)
    return p


def _verify_arguments(v) -> None:
    v.add_argument("--only", help="comma-separated claim ids, e.g. M3,T7 (default: all)")
    v.add_argument("--profile", default="quick", help="quick or thorough")
    v.add_argument("--out", help="where to write claims.json: a new file or a claims.json written "
                                 "before (merged); any other file is refused (default: "
                                 "build/repro/claims.json, or $TAILTHEORY_FIGURES/claims.json; "
                                 "`make figures` rewrites the committed figures/claims.json)")
    v.add_argument("--quiet", action="store_true", help="no progress bar")
    v.add_argument("--verbose", action="store_true", help="print tracebacks of failing checks")


def _train_arguments(t) -> None:
    from tailtheory.engine.config import add_config_arguments

    add_config_arguments(t)
    t.add_argument("--recipe", default=None,
                   help="a named recipe that sets task, model, warm start, batch, learning rate, "
                        "steps and evaluation ('learn': the learning testbed); explicit flags "
                        "override its fields; 'list' prints the recipes")
    t.add_argument("--resume", action="store_true", help="continue the run in --out exactly")
    t.add_argument("--quiet", action="store_true", help="no progress bar")


def _study_arguments(st) -> None:
    st.add_argument("name", help="a study name, or 'list'")
    st.add_argument("--preset", help="quick or full (default: the preset the study stores)")
    st.add_argument("--workers", type=int, default=2, help="runs trained at a time, one "
                                                           "thread each")
    st.add_argument("--dry-run", action="store_true",
                    help="only count the runs: stored in results/NAME.json, cached, to train "
                         "(with --executor ray|slurm or --device: each run, and the cost)")
    st.add_argument("--store-done", action="store_true",
                    help="train nothing: store the runs the cache holds finished")
    add_cluster_arguments(st)


def _measure_arguments(m) -> None:
    m.add_argument("name", help="'list' (every stored file: kind, rows, models, machines, "
                                "command), "
                                "'stale' (the stores today's code no longer matches), or a "
                                "stored measurement's name")
    m.add_argument("--dry-run", action="store_true",
                   help="print what making NAME again costs and does, then stop")


MEASURE_EPILOG = """Resuming: a study (`tailtheory study NAME`), `decide_design_gate`, `ladder`,
`ladder_models`, `ladder_probes`, `v7_64`, `v7_units` and `v8_models` store each part as it
finishes and continue from what is stored; `dose_ladder_calibration` stores each rung as it
finishes but measures every rung again; every other measurement is stored once, at the end, and
starts over when stopped (the warm starts and half-way policies it reads stay cached). `stale` exits 1 when a store is stale or
missing, 2 when one cannot be read."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; subcommands register their own options here."""
    from tailtheory.diagnose.cli import add_diagnose_arguments, diagnose_main
    from tailtheory.experiments.plot import add_plot_arguments, plot_main
    from tailtheory.engine.start.warm_cache import add_sft_arguments, sft_main
    from tailtheory.probe.cli import add_probe_arguments, probe_main

    p = argparse.ArgumentParser(prog="tailtheory", description=__doc__.splitlines()[0],
                                formatter_class=_HelpFormatter)
    p.add_argument("--version", action="version", version=f"tailtheory {version()}")
    sub = p.add_subparsers(dest="command", required=True)
    _command(sub, "verify", _verify, "run the claim checks and write build/repro/claims.json",
             "Run the claim checks, print a table with timings and write build/repro/claims.json "
             "(deterministic: no timings in it; --out elsewhere).", _verify_arguments)
    _command(sub, "train", _train, "GRPO training with a method spec on a rollout path",
             "GRPO training with a method spec on a rollout path.", _train_arguments,
             epilog=TRAIN_EPILOG)
    _command(sub, "methods", _methods, "list the registered training methods")
    _command(sub, "sft", sft_main, "supervised warm start of a tiny LM or your model on a task",
             "Supervised warm start of a tiny LM on a task, trained until its sampled accuracy "
             "enters a window (cached under cache/sft; exit status 1 when it misses the window). "
             "With --model PATH --out DIR: warm-start your checkpoint through its own tokenizer "
             "and chat template and write a folder `tailtheory train --model DIR` takes.",
             add_sft_arguments)
    _command(sub, "ladder", ladder, "the model-size ladder of the matched testbed",
             "The model-size ladder: named rungs of the matched recipe's architecture, each "
             "pretrained on the standard library and warm-started on kk_prose (cached); list "
             "prints the rung table, build trains what the cache lacks and records each rung in "
             "results/ladder.json; batch-shape measures the batch-shape mismatch (V8) on the "
             "built rungs, precision the bf16 / fp16 mismatch ratio (V7).", ladder_arguments)
    _command(sub, "plot", plot_main, "draw training runs against step (seeds as a band)",
             "Draw reward, accuracy, entropy, mismatch and method metrics of training runs "
             "against step; runs that differ only in seed form one band.", add_plot_arguments)
    _command(sub, "study", _study, "train and measure a registered training study",
             "Train what the run cache lacks of a registered training study and store its runs "
             "one by one in results/NAME.json (the numbers its claims' verdicts read); 'list' "
             "names them.", _study_arguments)
    _command(sub, "measure", _measure, "list, check and make again the stored measurements",
             "The stored measurements of results/: 'list' names every file with its kind "
             "(study, measurement, record, superseded), the command that makes it, its rows, "
             "the models (weights fingerprints) it measured and the machines it ran on; "
             "'stale' the stores whose config "
             "today's code no longer asks for; NAME prints what making it again costs and "
             "does, then makes it (a study: `tailtheory study NAME`).", _measure_arguments,
             epilog=MEASURE_EPILOG)
    _command(sub, "diagnose", diagnose_main, "token-tail report of a real run's per-token dumps",
             "Read per-token dumps of a run (this engine's --dump-tokens, a framework's dumps or "
             "the generic format of docs/diagnose.md) and write DIR/report.html, its figures and "
             "DIR/summary.json; with --certify, certify each step's mean k3 against a bar (exit "
             "status 0 pass, 1 fail, 2 cannot decide).",
             add_diagnose_arguments)
    _command(sub, "probe", probe_main,
             "a per-model probe (mismatch, pruning, gradient, decisiveness) on any checkpoint",
             "Run a per-model probe on a checkpoint, on text windows read with its own "
             "tokenizer: mismatch (M7/V2), pruning (P4) or gradient (L1/L4/L5); or, on a "
             "task's GRPO batch, decisiveness (which low-probability tokens decide the answer: "
             "--model PATH --task T, or --recipe R --policy warm|mid); write the figures and "
             "tables into --out and print a summary.",
             add_probe_arguments, epilog=PROBE_EPILOG)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tailtheory`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.explicit = _explicit_fields(parser, args, argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader of stdout left (`| head`): stop quietly, as cat does
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # the shell's status for SIGPIPE
    except KeyboardInterrupt:  # Ctrl-C: one line, the way on, and the shell's status for SIGINT
        start = "" if getattr(args, "quiet", True) else "\n"  # end the progress bar's line
        print(f"{start}tailtheory: interrupted{_continue_hint(args, argv)}", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:  # bad input: one clear line, no traceback
        print(f"tailtheory: error: {exc}", file=sys.stderr)
        return 2


def _explicit_fields(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     argv: list[str]) -> list[str]:
    """The destinations of the options written out in ``argv`` (a recipe keeps the rest)."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = getattr(args, "command", None)
    if sub is None or command not in sub.choices:
        return []
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    return [a.dest for a in sub.choices[command]._actions
            if any(o in given for o in a.option_strings)
            and a.dest not in ("help", "recipe", "resume", "quiet")]


def _continue_hint(args: argparse.Namespace, argv: list[str]) -> str:
    """How to carry on after Ctrl-C: the exact command (``train`` gains ``--resume``)."""
    if args.command != "train":
        return ""
    from tailtheory.engine.rundir import is_run

    if not is_run(args.out):
        return f"; nothing was written, start again with: tailtheory {shlex.join(argv)}"
    again = argv if args.resume else [*argv, "--resume"]
    return f"; continue the run with: tailtheory {shlex.join(again)}"


if __name__ == "__main__":
    sys.exit(main())
