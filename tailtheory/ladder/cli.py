"""The ladder's command, ``tailtheory ladder ACTION``: list, status, build the rungs' models, and
measure on named models (V8 batch shape, V7 precision, the effects) and on the rungs (V6's noise
calibration).

Imports inside the functions keep ``tailtheory --help`` fast (a front end's start-up time).
"""

from __future__ import annotations

import sys


def ladder_arguments(p) -> None:
    """The options of ``tailtheory ladder``."""
    from tailtheory.engine.start.rungs import RUNGS

    p.add_argument("action", choices=("list", "status", "build", "batch-shape", "precision",
                                       "effects", "calibrate"),
                   help="list: the rung table (built rungs with their held-out perplexity and "
                        "warm-start accuracy); status: the named models (committed, recorded, "
                        "unrecorded), how far each rung's build is in this cache and what each "
                        "claim still needs; build: train what the cache lacks (continuing a "
                        "stopped build) and record each model; batch-shape: V8 on named models' "
                        "corpus LMs; precision: V7 on named models; effects: L1, L4, L5, M7, V2 "
                        "and P4 on named models (what is stored is skipped), then the trend "
                        "family; calibrate: the logit-noise sigma of each k3 of V6's ladder grid "
                        "on built rungs' warm starts")
    p.add_argument("--model", action="append", metavar="LABEL",
                   help="batch-shape, precision, effects: a named model (RUNG.bBUILD-FINGERPRINT, "
                        "`tailtheory ladder status`; repeatable; default: every model whose "
                        "weights are kept here and whose rows are missing)")
    p.add_argument("--rule", choices=("v7_64", "v7_units"), default="v7_units",
                   help="precision: V7's rule: v7_units, 256 prompts and bounds settled to a "
                        "Monte Carlo sd of 0.05; v7_64, the first rule's 64 prompts and one "
                        "bootstrap (default: v7_units)")
    p.add_argument("--part", action="append",
                   choices=("tail", "p4", "lopti", "decisive", "step"),
                   help="effects: a part (repeatable; default tail, p4, lopti, the parts the "
                        "trends read): tail = M7, V2; p4; lopti = L1, L4, L5; decisive share; "
                        "step speed")
    p.add_argument("--seed", action="append", type=int, choices=(1, 2, 3),
                   help="effects: a seed to measure (repeatable; default 1, 2 and 3)")
    p.add_argument("--rung", action="append", choices=[r.name for r in RUNGS],
                   help="build, calibrate: a rung (repeatable; default: every rung, smallest "
                        "first; batch-shape: every built one)")
    p.add_argument("--build", action="append", type=int, dest="builds", metavar="B",
                   help="build: a build of each rung to build (repeatable; default 0): build B is "
                        "corpus-LM seed B and warm-start seed B, an independent model of the "
                        "rung, named by its weights (results/ladder_models.json)")
    p.add_argument("--no-corpus", action="store_true",
                   help="build: record a warm start committed in weights/ without building its "
                        "corpus LM (no perplexity and no V8 until it is built)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads; 0 (default) picks the toolkit's choice for the size")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def ladder(args) -> int:
    """``tailtheory ladder ACTION``: the actions of :func:`ladder_arguments`; exit status 0."""
    from tailtheory.ladder import build, dose, mismatch, models, probes, report

    if args.action == "list":
        print(build.table())
        return 0
    if args.action == "status":
        print("Models (results/ladder_models.json; committed: weights/ holds it; recorded: its "
              "fingerprint, machine and perplexity are, its rows count; unrecorded: no "
              "fingerprint, out of every verdict):")
        for m in models.summary():
            ppl = f"perplexity {m['heldout_ppl']:.1f}" if m.get("heldout_ppl") else \
                "perplexity not measured here"
            print(f"  {m['label']:22s} {m['state']:10s} built on {m['cpu'] or 'an unrecorded CPU'}"
                  f"; {ppl}; warm start {m['warm_accuracy']:.3f}")
        print("Rungs (build 0) in this cache:")
        for row in build.status():
            state = "recorded built" if row["built"] else "not built"
            print(f"  {row['rung']:5s} {state}; corpus LM {row['corpus']}; "
                  f"warm start {row['warm']}")
        print(report.size_report(costs=True))
        return 0
    if args.action == "batch-shape":
        for name, entry in probes.measure_v8(args.model, threads=args.threads or 1).items():
            print(f"{name}: hf bf16 batch 32: |Delta| > 1e-3 on a share "
                  f"{probes.v8_value(entry)} of the tokens (on {entry['machine']})")
        print(f"wrote results/{probes.V8_STORE}.json")
        return 0
    if args.action == "precision":
        for name, row in mismatch.measure_v7(args.model, rule=args.rule,
                                             threads=args.threads or 1).items():
            for setting, x in row["settings"].items():
                print(f"{name} {setting}: k3 bf16 {x['k3']['bf16']:.3g}, fp16 "
                      f"{x['k3']['fp16']:.3g}, ratio {x['ratio']:.1f} ({x['low']:.1f}-"
                      f"{x['high']:.1f}): {row['verdict']}")
        print(f"wrote results/{args.rule}.json")
        return 0
    if args.action == "calibrate":
        for name, row in dose.measure_noise_sigmas(args.rung, threads=args.threads or 1).items():
            print(f"{name}: " + ", ".join(f"k3 {t}: sigma {x['sigma']:.3g} (k3 {x['k3']:.3g})"
                                          for t, x in row["targets"].items()))
        print(f"wrote results/{dose.CALIBRATION}.json")
        return 0
    if args.action == "effects":
        probes.measure_probes(args.model, tuple(args.part or probes.PARTS),
                              tuple(args.seed or probes.SEEDS), threads=args.threads or 1,
                              progress=not args.quiet)
        print(probes.table(probes.main_machine()))
        print(f"wrote results/{probes.STORE}.json")
        return 0
    for row in build.build(args.rung, progress=not args.quiet, threads=args.threads,
                           builds=tuple(args.builds or (0,)), corpus_lms=not args.no_corpus):
        if "heldout_ppl" not in row:
            print(f"{row['label']}: committed warm start recorded (corpus LM not built here)",
                  file=sys.stderr)
            continue
        print(f"{row['label']}: held-out perplexity {row['heldout_ppl']:.1f}, warm start "
              f"{row['warm_accuracy']:.3f} after {row['warm_steps']} steps", file=sys.stderr)
    print(f"wrote results/{models.MODELS}.json")
    return 0
