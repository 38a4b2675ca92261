"""``tailtheory diagnose DUMP [DUMP ...] --out DIR``: the token-tail report of a real run;
``tailtheory diagnose DUMP --certify [--bar K3] [--out DIR] [--json]``: its certification.

Reads per-token dumps (formats: :mod:`tailtheory.diagnose.read`, ``docs/diagnose.md``) in
batches, folds them into streaming sums (:mod:`tailtheory.diagnose.aggregate`), and only when
every file has been read writes ``DIR/report.html``, its figures with their CSVs and
``DIR/summary.json`` (:mod:`tailtheory.diagnose.report`). Rows with NaN or infinite log-probs
are excluded and counted; more than ``--max-excluded`` of them is an error.

With ``--certify`` the command prints the certification
(:mod:`tailtheory.diagnose.sections.certify`: each step's token-mean k3 of ``log rho =
logp_train - logp_rollout`` against ``--bar``) in lines, or as one JSON line with ``--json``,
writes the report only when ``--out`` is given, and exits 0 (pass), 1 (fail) or 2 (cannot
decide: too few steps, a file without steps, or dumps it cannot read, the reason named).

With ``--resume-at STEP`` it prints the check across the resume
(:mod:`tailtheory.diagnose.sections.resume`: each step's mean k3, mean ``|log rho|`` and mean
reward, 5 steps each side), writes the report only when ``--out`` is given, and exits 0 (no
jump), 1 (a jump) or 2 (too few steps on a side, or ``STEP`` not in the dump: one line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tailtheory.diagnose.read import BATCH_ROWS, format_names

DEFAULT_RHOS = (1e-8, 1e-6, 1e-4, 1e-2)
"""DVP's min-p ratios swept: DVP's 1e-8 .. 1e-4 range (arXiv 2512.23087) and P4's 1e-2."""
TAIL_P = 0.1
"""Tail tokens: trainer ``p < 0.1`` (``tailtheory.mismatch.accumulation.TAIL_P``, M6)."""
HEAD_P = 0.9
"""Head tokens: trainer ``p > 0.9`` (``tailtheory.mismatch.real.HEAD_P``, M7)."""
MAX_EXCLUDED = 0.01
"""Largest fraction of rows that may be excluded (NaN / inf log-probs) before it is an error."""
DTYPES = ("bfloat16", "float16", "float32")
"""What ``--dtype`` accepts: the rollout engine's precision."""


def _trm_defaults() -> tuple[float, float]:
    from tailtheory.engine.types import MethodParams

    hp = MethodParams()
    return hp.trm_delta_max, hp.trm_delta_avg


def run_diagnose(dumps, out, *, max_excluded: float = MAX_EXCLUDED, **options):
    """Read ``dumps`` and write the report into ``out``; returns the :class:`Diagnosis`.

    Source: DVP (M3-M6, P2/P4), TRM (T12), TIM (k1/k3). ``options`` are those of
    :func:`diagnose_dumps`. Raises ``ValueError`` / ``FileNotFoundError`` on bad input (more
    than ``max_excluded`` of the rows excluded is bad input), before anything is written.
    """
    from tailtheory.diagnose.report import check_out, write_report

    if not 0 <= max_excluded <= 1:
        raise ValueError(f"--max-excluded must lie in [0, 1], got {max_excluded}")
    out = Path(out)
    check_out(out)                                        # fail before reading, not after
    d = diagnose_dumps(dumps, **options)
    _check_excluded(d.summary, max_excluded)
    write_report(d, out, d.inputs)
    return d


def diagnose_dumps(dumps, *, fmt: str = "auto", batch_rows: int = BATCH_ROWS, rhos=DEFAULT_RHOS,
                   tail_p: float = TAIL_P, head_p: float = HEAD_P,
                   delta_max: float | None = None, delta_avg: float | None = None,
                   progress: bool = False, register: list[dict] | None = None,
                   params: float | None = None, bar: float | None = None,
                   resume_at: int | None = None, dtype: str | None = None):
    """Every section of the report from ``dumps`` (in format ``fmt``, one of
    :func:`tailtheory.diagnose.read.format_names`, detected per file when ``auto``), read
    ``batch_rows`` rows at a time; writes nothing. ``delta_max`` / ``delta_avg`` default to the
    engine's TRM thresholds (``MethodParams``); ``register`` (rows of
    ``tailtheory.tim.dose.register_table``) defaults to the stored dose-response register (V6);
    ``params``, the run's model parameters, picks the ladder's rung its k3 is compared with;
    ``bar``, the certification's bar on each step's mean k3 (default: prime-rl's 0.015);
    ``resume_at``, the step a resumed run restarted at (``None``: no resume check);
    ``dtype``, the rollout engine's declared precision (``bfloat16``, ``float16`` or
    ``float32``: the rounding the run's noise level is compared with; ``None``: the dump's stored
    half precision where it has one, else bfloat16, said as assumed).
    Source: DVP (M3-M6, P2/P4), TRM (T12), TIM (k1/k3).
    """
    from tqdm.auto import tqdm

    from tailtheory.diagnose.aggregate import Accumulator
    from tailtheory.diagnose.build import diagnosis
    from tailtheory.ladder.place import nearest_rung
    from tailtheory.diagnose.read import expand_dumps, iter_batches, open_dumps
    from tailtheory.diagnose.sections import SECTIONS
    from tailtheory.diagnose.sections.certify import check_bar

    dm, da = _trm_defaults()
    delta_max, delta_avg = (dm if delta_max is None else delta_max,
                            da if delta_avg is None else delta_avg)
    _check_options(batch_rows, rhos, tail_p, head_p, delta_max, delta_avg)
    if params is not None:
        nearest_rung(params, {"any": 1})            # a bad --params fails before any reading
    if bar is not None:
        check_bar(bar)
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    files = expand_dumps(dumps)
    opened = open_dumps(files, fmt)
    acc = Accumulator(files, tail_p, head_p, tuple(rhos), delta_max,
                      kinds=[d.kind for d in opened], sections=SECTIONS, dumps=opened)
    rows = [d.rows for d in opened]
    shown = tqdm(total=None if None in rows else sum(rows), unit="rows", desc="diagnose",
                 disable=not progress, file=sys.stderr)
    with shown:
        for i, dump in enumerate(opened):
            for batch in iter_batches(dump, i, batch_rows):
                acc.add(batch)
                shown.update(len(batch.ok))
    d = diagnosis(acc, delta_max, delta_avg, register, params, bar, resume_at, dtype)
    d.inputs = files
    return d


def _check_options(batch_rows, rhos, tail_p, head_p, delta_max, delta_avg):
    if int(batch_rows) < 1:
        raise ValueError(f"--batch-rows must be >= 1, got {batch_rows}")
    if not rhos or not all(0 < float(r) <= 1 for r in rhos):
        raise ValueError(f"--rho values must lie in (0, 1], got {list(rhos)}")
    if not (0 < tail_p <= head_p < 1):
        raise ValueError(f"need 0 < --tail-p <= --head-p < 1, got {tail_p} and {head_p}")
    if not (delta_max > 0 and delta_avg > 0):
        raise ValueError(f"TRM thresholds must be > 0, got {delta_max} and {delta_avg}")


def _check_excluded(summary: dict, max_excluded: float) -> None:
    n, bad = summary["tokens"] + summary["excluded_rows"], summary["excluded_rows"]
    if bad == 0:
        return
    cols = ", ".join(f"{c}: {k}" for c, k in summary["excluded_by_column"].items())
    what = f"{bad} of {n} rows ({100 * bad / n:.3g}%) have NaN or infinite values ({cols})"
    if bad > max_excluded * n:
        raise ValueError(f"{what}: more than --max-excluded {max_excluded:g}; nothing written")
    print(f"tailtheory: warning: {what}; excluded (summary.json: excluded_rows)", file=sys.stderr)


def add_diagnose_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``tailtheory diagnose``."""
    dm, da = _trm_defaults()
    p.add_argument("dumps", nargs="+", metavar="DUMP",
                   help="dump files (.parquet / .jsonl / slime's .pt), a run directory or a "
                        "folder of dumps")
    p.add_argument("--format", default="auto", choices=format_names(), dest="fmt",
                   help="the dumps' format (default: detected per file from its name and keys)")
    p.add_argument("--out", default=None,
                   help="output folder: new, empty, or an earlier diagnose output (replaced); "
                        "required unless --certify")
    p.add_argument("--certify", action="store_true",
                   help="certify the run: pass (exit 0) when every step's token-mean k3 of "
                        "log rho = logp_train - logp_rollout (prime-rl's sign) is <= --bar over "
                        ">= 20 steps, fail (exit 1) when a step is above it, cannot decide "
                        "(exit 2) on fewer steps or a dump without steps; prints the failing "
                        "steps and the worst tokens; the report only with --out")
    p.add_argument("--bar", type=float, default=None, metavar="K3",
                   help="the certification's bar on each step's mean k3 (default 0.015: "
                        "prime-rl's PR 2672, the mean mismatch KL of each of 20 steps at "
                        "learning rate 0); 0 means bitwise equal at the dump's stored precision")
    p.add_argument("--resume-at", type=int, default=None, metavar="STEP",
                   help="check a run resumed from a checkpoint at STEP (its first step after "
                        "the resume): each step's mean k3, mean |log rho| and mean reward over "
                        "5 steps each side; exit 1 when one jumps beyond 4 robust sd of the "
                        "step-to-step changes, 0 when none does, 2 when it cannot check; the "
                        "report only with --out")
    p.add_argument("--json", action="store_true",
                   help="with --certify: print the certification as one JSON line")
    p.add_argument("--rho", default=",".join(f"{r:g}" for r in DEFAULT_RHOS),
                   help="DVP min-p ratios, comma-separated (needs top-k columns)")
    p.add_argument("--trm-delta-max", type=float, default=dm,
                   help="TRM threshold on max_t k2 (the engine's default)")
    p.add_argument("--trm-delta-avg", type=float, default=da,
                   help="TRM threshold on mean_t k3 (the engine's default)")
    p.add_argument("--tail-p", type=float, default=TAIL_P, help="tail tokens: trainer p below")
    p.add_argument("--head-p", type=float, default=HEAD_P, help="head tokens: trainer p above")
    p.add_argument("--max-excluded", type=float, default=MAX_EXCLUDED,
                   help="largest fraction of rows with NaN / inf log-probs to exclude")
    p.add_argument("--batch-rows", type=int, default=BATCH_ROWS, help="rows read at a time")
    p.add_argument("--params", type=float, default=None, metavar="N",
                   help="the run's model parameters (e.g. 1.5e9): its k3 is compared with "
                        "GRPO's threshold at the nearest rung of the model-size ladder (V6); "
                        "default: the ladder's largest rung")
    p.add_argument("--dtype", default=None, choices=DTYPES,
                   help="the rollout engine's precision, which sets the rounding the run's noise "
                        "level is compared with (default: the dump's stored half precision "
                        "where it has one, else bfloat16, said as assumed)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def diagnose_main(args: argparse.Namespace) -> int:
    """Entry point of ``tailtheory diagnose``: prints the verdict lines and where it wrote;
    with ``--certify``, the certification (:func:`certify_main`); with ``--resume-at``, the
    check across the resume (:func:`resume_main`)."""
    try:
        rhos = tuple(float(r) for r in args.rho.split(",") if r.strip())
    except ValueError:
        raise ValueError(f"--rho must be comma-separated numbers, got {args.rho!r}") from None
    options = dict(fmt=args.fmt, batch_rows=args.batch_rows, rhos=rhos, tail_p=args.tail_p,
                   head_p=args.head_p, delta_max=args.trm_delta_max,
                   delta_avg=args.trm_delta_avg, progress=not args.quiet, params=args.params,
                   bar=args.bar, dtype=args.dtype)
    if args.certify and args.resume_at is not None:
        raise ValueError("--certify and --resume-at: one at a time")
    if args.certify:
        return certify_main(args, options)
    if args.resume_at is not None:
        return resume_main(args, options)
    if args.out is None:
        raise ValueError("--out DIR is required (only --certify and --resume-at run without it)")
    if args.json:
        raise ValueError("--json goes with --certify")
    d = run_diagnose(args.dumps, args.out, max_excluded=args.max_excluded, **options)
    for name, lines in d.verdicts.items():
        for line in lines:
            print(f"[{name}] {line}")
    print(f"wrote {Path(args.out) / 'report.html'} and {Path(args.out) / 'summary.json'}")
    return 0


def certify_main(args: argparse.Namespace, options: dict) -> int:
    """``--certify``: the certification of ``args.dumps`` printed as lines (or one JSON line,
    ``--json``), the report written when ``--out`` is given; returns the exit status (0 pass,
    1 fail, 2 cannot decide). Bad options are refused before any reading (``ValueError``);
    dumps that cannot be read make it undecided, with the reason."""
    from tailtheory.diagnose.report import check_out
    from tailtheory.diagnose.sections.base import json_safe
    from tailtheory.diagnose.sections.certify import (DEFAULT_BAR, certify_lines, check_bar,
                                                      undecided)

    bar = DEFAULT_BAR if args.bar is None else check_bar(args.bar)
    _check_options(options["batch_rows"], options["rhos"], options["tail_p"],
                   options["head_p"], options["delta_max"], options["delta_avg"])
    if not 0 <= args.max_excluded <= 1:
        raise ValueError(f"--max-excluded must lie in [0, 1], got {args.max_excluded}")
    out = None if args.out is None else Path(args.out)
    if out is not None:
        check_out(out)                                    # refused before reading, not after
    try:
        if out is None:
            d = diagnose_dumps(args.dumps, **{**options, "bar": bar})
            _check_excluded(d.summary, args.max_excluded)
        else:
            d = run_diagnose(args.dumps, out, max_excluded=args.max_excluded,
                             **{**options, "bar": bar})
        c = d.summary["certify"]
    except (ValueError, FileNotFoundError) as exc:
        c, out = undecided(str(exc), bar), None
    if args.json:
        print(json.dumps(json_safe({**c, "out": None if out is None else str(out)})))
    else:
        print("\n".join(f"[certify] {line}" for line in certify_lines(c)))
        if out is not None:
            print(f"wrote {out / 'report.html'} and {out / 'summary.json'}")
    return c["status"]


def resume_main(args: argparse.Namespace, options: dict) -> int:
    """``--resume-at STEP``: the check across the resume printed as lines, the report written
    when ``--out`` is given; returns the exit status (0 no jump, 1 a jump). A check that cannot
    be made raises ``ValueError`` (exit 2 with one line), before anything is written."""
    if args.json:
        raise ValueError("--json goes with --certify")
    if not 0 <= args.max_excluded <= 1:
        raise ValueError(f"--max-excluded must lie in [0, 1], got {args.max_excluded}")
    options = {**options, "resume_at": args.resume_at}
    if args.out is None:
        d = diagnose_dumps(args.dumps, **options)
        _check_excluded(d.summary, args.max_excluded)
    else:
        d = run_diagnose(args.dumps, args.out, max_excluded=args.max_excluded, **options)
    print("\n".join(f"[resume] {line}" for line in d.verdicts["resume"]))
    if args.out is not None:
        print(f"wrote {Path(args.out) / 'report.html'} and {Path(args.out) / 'summary.json'}")
    return d.summary["resume"]["status"]
