"""The warm-start cache: find a warm start or train it, keep it on disk, hand out only usable ones.

A warm start (:mod:`tailtheory.engine.start.sft`) is cached by the hash of its config
(:func:`~tailtheory.engine.start.sft.config_hash`) under ``cache/sft/<hash>/`` of the checkout (or
``$TAILTHEORY_CACHE/sft/<hash>/``): ``save_pretrained`` model and tokenizer plus ``sft.json``
(steps, accuracy, seconds, the accuracy history). It is written to a temporary folder and renamed
into place, so a crash never leaves a half-written checkpoint behind. A run that misses the window
is kept for inspection but marked ``"usable": false``: :func:`warm_start` raises
:class:`WarmStartMissed` for it (saying what to do) instead of handing it to RL. ``tailtheory
sft`` (:func:`sft_main`) is this module's command line.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tailtheory.core.io import (CACHE_ENV, REPO_ROOT, atomic_write_json,  # noqa: F401
                                cache_dir)
from tailtheory.core.models import load_lm
from tailtheory.core.models import load_tokenizer
from tailtheory.core.provenance import cpu_model, weights_fingerprint
from tailtheory.engine.start.resume import Resume, partial_folder
from tailtheory.engine.start.sft import TASK_DEFAULTS, SFTConfig, config_hash, train_sft
from tailtheory.engine.start.sft_model import ModelSFTConfig, sft_model_main
from tailtheory.engine.tasks.task import TASKS, Task, get_task
from tailtheory.engine.threads import resolve_threads

class WarmStartMissed(ValueError):
    """The warm start ended outside its accuracy window; its message says what to do."""


def cache_root() -> Path:
    """``$TAILTHEORY_CACHE/sft``, else ``cache/sft`` of the checkout (or working directory)."""
    return cache_dir("sft")


def warm_start(cfg: SFTConfig = SFTConfig(), progress: bool = True, force: bool = False,
               threads: int = 0) -> Path:
    """The cached warm-start checkpoint of ``cfg``, training it first if it is not cached.

    Returns the folder holding ``config.json``, weights, ``tokenizer.json`` and ``sft.json``.
    ``force`` retrains and replaces a cached result; ``threads`` is the torch CPU thread count of
    the training (0: :func:`~tailtheory.engine.threads.default_threads`). A run that misses the
    accuracy window is saved, marked unusable, and raises :class:`WarmStartMissed`; it is
    retrained only when ``cfg`` gives it more steps than it had.
    """
    final = cache_root() / config_hash(cfg)
    cached = read_record(final) if (final / "sft.json").exists() else None
    if cached is not None and not force:
        if usable(cached):
            return final
        if not _more_budget(cached, cfg):
            raise WarmStartMissed(missed_message(cached, final))
    if cached is None and not force and (src := committed(cfg)) is not None:
        return _adopt(src, final)
    if force:
        Resume(partial_folder(final), "").clear()
    model, task, record = train_sft(cfg, progress, threads=threads,
                                    checkpoints=partial_folder(final))
    if usable(record) or cached is None or not usable(cached):  # a miss never replaces a usable
        _save(final, model, task, record)
    Resume(partial_folder(final), "").clear()
    if not usable(record):
        raise WarmStartMissed(missed_message(record, final))
    return final


COMMITTED = REPO_ROOT / "weights"
"""Warm starts committed with the repository, as far as 30 MB in all allows: the base rung's
builds (``base``, the ``matched`` recipe's, so that runs on any CPU start from one model, and
``base.b1``, ``base.b2``: the smallest size's replicates), ``quick`` (the ``quick`` preset's,
which every fresh checkout's tests and notebooks train from), and ``decide`` and ``people2`` (the
``kk_knights`` warm starts of the ``decide`` recipe and of the design search's ``people2``
designs, whose decisiveness the ledger reads). Each folder is a warm-start
folder, float32 safetensors, whose ``sft.json`` holds its config hash and weights fingerprint.
:func:`warm_start` copies one into the cache instead of training it."""


def committed(cfg: SFTConfig) -> Path | None:
    """The committed warm start of ``cfg`` (:data:`COMMITTED`), or None."""
    key = config_hash(cfg)
    for rec in sorted(COMMITTED.glob("*/sft.json")):
        try:
            if json.loads(rec.read_text()).get("hash") == key:
                return rec.parent
        except (OSError, ValueError, AttributeError):
            continue
    return None


def _adopt(src: Path, final: Path) -> Path:
    """Copy the committed warm start ``src`` into the cache as ``final``, after checking its
    weights against the fingerprint its record holds (a damaged copy is an error, never used)."""
    want = read_record(src).get("weights")
    if weights_fingerprint(load_lm(src, device="cpu").float()) != want:
        raise ValueError(f"the committed warm start {src} does not match its fingerprint {want}; "
                         f"restore it from git (git checkout -- {src}) or delete it to train it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
        _rename_into(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _rename_into(tmp: Path, final: Path) -> None:
    """Rename the complete folder ``tmp`` onto ``final``; where another process has renamed its
    own copy of the same config there first (two runs starting at once on an empty cache), keep
    theirs: a folder only ever appears there whole."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / "sft.json").exists():
            raise


def _save(final: Path, model, task: Task, record: dict) -> None:
    """Write the checkpoint to a temporary folder and rename it onto ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    record = {**record, "weights": weights_fingerprint(model.float()), "cpu": cpu_model()}
    try:
        model.to("cpu").save_pretrained(tmp)
        task.tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / "sft.json", record)
        if final.exists():  # forced, or a miss given more steps
            shutil.rmtree(final)
        _rename_into(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def usable(record: dict) -> bool:
    """Whether a warm-start record ended inside its accuracy window (only those feed RL)."""
    return bool(record.get("usable", False))


def _more_budget(record: dict, cfg: SFTConfig) -> bool:
    """A miss is worth retraining only if it ran out of steps and ``cfg`` allows more."""
    return record["stop"] == "max_steps" and cfg.max_steps > record["config"]["max_steps"]


def sft_command(config: dict, **flags) -> str:
    """The ``tailtheory sft`` command line of a config (as a dict), with ``flags`` changed."""
    people = config["task_kwargs"].get("n_people")
    parts = ["tailtheory sft", f"--task {config['task']}"]
    parts += [f"--n-people {people}"] if people is not None else []
    task_default = TASK_DEFAULTS.get(config["task"], {}).get("eval_every", SFTConfig.eval_every)
    if config["eval_every"] != task_default:  # part of the cache key: keep it
        flags = {"eval_every": config["eval_every"], **flags}
    parts += [f"--{k.replace('_', '-')} {v}" for k, v in flags.items()]
    return " ".join(parts)


def missed_message(record: dict, path: Path) -> str:
    """Why a warm start is not used, and the command that would give a usable one."""
    low, high = record["window"]
    cfg = record["config"]
    what = (f"the warm start of {cfg['task']} missed its accuracy window [{low:.3f}, {high}]: "
            f"sampled accuracy {record['accuracy']:.3f} after {record['steps']} steps "
            f"(stop: {record['stop']}); it is not used (kept in {path} for inspection)")
    if record["stop"] == "overshoot":
        half = max(1, cfg["eval_every"] // 2)
        return (f"{what}. It overshot between two evaluations: evaluate more often with "
                f"`{sft_command(cfg, eval_every=half)}` and pass the folder it prints to "
                f"`tailtheory train --model`")
    return (f"{what}. Give it more steps: `{sft_command(cfg, steps=2 * cfg['max_steps'])}` "
            f"(then `tailtheory train` finds it in the cache)")


def warm_weights(cfg: SFTConfig) -> str | None:
    """The weights fingerprint of ``cfg``'s cached warm start (``None`` when none is cached; one
    saved before warm starts recorded it is fingerprinted now and the record completed)."""
    path = cache_root() / config_hash(cfg)
    if not (path / "sft.json").exists():
        return None
    record = read_record(path)
    if "weights" not in record:
        record["weights"] = weights_fingerprint(load_lm(path, device="cpu").float())
        atomic_write_json(path / "sft.json", record)
    return record["weights"]


def read_record(path: str | Path) -> dict:
    """The ``sft.json`` of a warm-start folder."""
    f = Path(path) / "sft.json"
    if not f.exists():
        raise FileNotFoundError(f"{path} is not a warm-start folder (no sft.json)")
    return json.loads(f.read_text())


def load_warm_start(path: str | Path, device=None):
    """``(model, task)`` of a warm-start folder: the model via ``load_lm``, the task rebuilt,
    speaking the tokenizer saved beside the weights (``load_tokenizer``)."""
    rec = read_record(path)
    model = load_lm(path, device=device)
    task = get_task(rec["config"]["task"], vocab_size=model.config.vocab_size,
                    tokenizer=load_tokenizer(path), **rec["config"]["task_kwargs"])
    return model, task


def add_sft_arguments(p) -> None:
    """Options of ``tailtheory sft`` on the ``argparse`` parser ``p``."""
    d = SFTConfig()
    p.add_argument("--task", default=d.task, help=f"one of {sorted(TASKS)} (default: {d.task})")
    p.add_argument("--n-people", type=int,
                   help="Knights and Knaves: people per puzzle (default: 3)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"the budget: most optimiser steps; a run that has not entered the "
                        f"accuracy window by then stops and is not used (default: {d.max_steps}; "
                        f"with --model {ModelSFTConfig.max_steps})")
    p.add_argument("--eval-every", type=int, default=None,
                   help=f"steps between sampled-accuracy evaluations (default: {d.eval_every}, "
                        f"or the task's own: {TASK_DEFAULTS})")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads; 0 picks one for small models on the CPU, several "
                        "times faster than torch's default on a machine whose cores are busy "
                        "(default: 0)")
    p.add_argument("--model", metavar="PATH",
                   help="warm-start this checkpoint (a save_pretrained folder with its tokenizer) "
                        "instead of a tiny LM, through its own tokenizer and chat template; "
                        "needs --out")
    p.add_argument("--out", metavar="DIR", help="with --model: the folder to write (new, or one "
                                                "an earlier sft --model wrote)")
    p.add_argument("--lr", type=float, help=f"with --model: AdamW learning rate (default: "
                                            f"{ModelSFTConfig.lr:g})")
    p.add_argument("--batch-size", type=int, help=f"with --model: sequences a step (default: "
                                                  f"{ModelSFTConfig.batch_size})")
    p.add_argument("--pool-size", type=int, help=f"with --model: training problems generated up "
                                                 f"front (default: {ModelSFTConfig.pool_size})")
    p.add_argument("--force", action="store_true", help="retrain even if cached")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def sft_main(args) -> int:
    """``tailtheory sft``: warm-start (or find in the cache) and print where and how well.

    Exit status 0 when the sampled accuracy is inside the window, 1 otherwise (with a message
    saying what to do).
    """
    resolve_threads(args.threads, 0)  # a bad count fails before any work
    if args.model is not None:
        return sft_model_main(args)
    if any(v is not None for v in (args.out, args.lr, args.batch_size, args.pool_size)):
        raise ValueError("--out, --lr, --batch-size and --pool-size go with --model PATH (the tiny warm "
                         "starts are cached under their config; see tailtheory sft --help)")
    people = args.n_people
    kk = args.task.startswith("kk")
    kwargs = {} if people is None or (kk and people == 3) else {"n_people": people}
    cfg = SFTConfig.for_task(args.task, task_kwargs=kwargs,
                             max_steps=SFTConfig.max_steps if args.steps is None else args.steps,
                             **({} if args.eval_every is None else {"eval_every": args.eval_every}))
    try:
        path = warm_start(cfg, progress=not args.quiet, force=args.force, threads=args.threads)
    except WarmStartMissed as exc:
        print(f"tailtheory: {exc}", file=sys.stderr)
        return 1
    rec = read_record(path)
    low, high = rec["window"]
    print(f"{cfg.task}: {rec['steps']} steps, sampled accuracy {rec['accuracy']:.3f} "
          f"(window [{low:.3f}, {high}], stop: {rec['stop']}), "
          f"{rec['seconds']:.0f} s\n{path}")
    return 0
