"""Warm-start a user's checkpoint on a task: ``tailtheory sft --model PATH --out DIR``.

The toolkit's own warm starts (:mod:`tailtheory.engine.start.sft`) train a tiny LM into the
task's accuracy window; this does the same to a checkpoint a user saved with
``save_pretrained``, through its own tokenizer and chat template (a template with Qwen3's
thinking switch is applied with thinking off, :mod:`tailtheory.engine.tasks.chat`, and that is
recorded), so that ``tailtheory train --model DIR`` starts RL from a policy that solves the task
sometimes. The same loop as the tiny warm starts: AdamW on ``prompt -> answer <stop>`` pairs,
the sampled accuracy on held-out problems every ``eval_every`` steps, a stop as soon as it enters
the window ``[max(acc_low, chance + margin), acc_high]`` or after ``max_steps``.

``DIR`` always receives a folder ``train --model`` takes (weights in float32, the tokenizer,
the generation config, and ``sft.json``: the sampled accuracy, whether it reached the window,
the source folder's fingerprint, the chat-template arguments and the stop ids), also when the
window was missed (then the command's exit status is 1). It is written to a temporary folder and
renamed into place, and an existing ``DIR`` is replaced only when an earlier ``sft --model`` made
it: a folder it did not create is refused, so no user file is overwritten.

Defaults are those of fine-tuning a pretrained model (lr 1e-5, batch 16); a random tiny
checkpoint (the tests') needs lr ~1e-3.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tailtheory.core.io import atomic_write_json
from tailtheory.core.models import (checkpoint_fingerprint, lm_config, load_lm, load_tokenizer,
                                    num_params)
from tailtheory.core.provenance import cpu_model, weights_fingerprint
from tailtheory.engine.devices import resolve_device
from tailtheory.engine.start.resume import Resume, partial_folder
from tailtheory.engine.start.sft import SFTConfig, sft_loop
from tailtheory.engine.tasks.chat import generation_eos_ids
from tailtheory.engine.tasks.task import get_task
from tailtheory.engine.tasks.tokenizer import check_tokenizer
from tailtheory.engine.threads import resolve_threads, torch_threads

MADE_BY = "tailtheory sft --model"
"""The mark in ``DIR/sft.json`` that lets a later ``sft --model`` replace ``DIR``."""

RECORD = "sft.json"


@dataclass(frozen=True)
class ModelSFTConfig:
    """A warm start of the checkpoint in ``model`` on ``task``, written to ``out``."""

    model: str
    """The checkpoint's folder (``save_pretrained``: config, weights, tokenizer)."""
    out: str
    """Where the warm-started checkpoint goes (a new folder, or one an earlier run made)."""
    task: str = "kk"
    task_kwargs: dict = field(default_factory=dict)
    lr: float = 1e-5
    batch_size: int = 16
    max_steps: int = 500
    eval_every: int = 25
    eval_n: int = 128
    """Held-out problems per evaluation (standard error <= 4.4%)."""
    pool_size: int = 4096
    """Training problems generated (and run through the chat template) up front."""
    acc_low: float = 0.10
    acc_high: float = 0.70
    chance_margin: float = 0.10
    seed: int = 0
    device: str = "auto"
    threads: int = 0

    def training(self) -> SFTConfig:
        """The loop's knobs as the tiny warm starts' :class:`SFTConfig` (its ``model`` unused)."""
        keep = ("task", "task_kwargs", "lr", "batch_size", "max_steps", "eval_every", "eval_n",
                "pool_size", "acc_low", "acc_high", "chance_margin", "seed")
        return SFTConfig(**{k: getattr(self, k) for k in keep})


def check_out(out: str | Path, model: str | Path) -> None:
    """Refuse (one line) an ``out`` that is the model's own folder, or an existing non-empty
    folder that no earlier ``sft --model`` made (its ``sft.json`` lacks :data:`MADE_BY`)."""
    out, model = Path(out), Path(model)
    if out.exists() and model.exists() and out.resolve() == model.resolve():
        raise ValueError(f"--out {out} is the model's own folder; pass a new folder")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; pass a new folder")
    if out.is_dir() and any(out.iterdir()) and not _ours(out):
        raise ValueError(f"--out {out} holds files `{MADE_BY}` did not write; pass a new folder "
                         f"(it replaces only a folder an earlier run of it made)")


def _ours(out: Path) -> bool:
    try:
        return json.loads((out / RECORD).read_text()).get("made_by") == MADE_BY
    except (OSError, ValueError, AttributeError):
        return False


def sft_model(cfg: ModelSFTConfig, progress: bool = True) -> tuple[Path, dict]:
    """Warm-start ``cfg.model`` on ``cfg.task`` and write it to ``cfg.out``; ``(out, record)``.

    Every check (the out folder, the model config, the tokenizer speaking the task) runs before
    the weights load. ``record["in_window"]`` says whether the sampled accuracy reached the
    window; the folder is written either way."""
    check_out(cfg.out, cfg.model)
    training = cfg.training()                     # bad knobs fail here
    config = lm_config(cfg.model)
    tokenizer = load_tokenizer(cfg.model)
    check_tokenizer(tokenizer, config.vocab_size, str(cfg.model))
    task = get_task(cfg.task, vocab_size=config.vocab_size, tokenizer=tokenizer,
                    stop_ids=generation_eos_ids(cfg.model), **cfg.task_kwargs)
    device = resolve_device(cfg.device)
    model = load_lm(cfg.model, device=device).float()
    with torch_threads(resolve_threads(cfg.threads, num_params(model), device)):
        model, task, rec = sft_loop(training, model.train(), task, device, progress,
                                    partial_folder(Path(cfg.out)))
    rec.pop("hash", None)
    rec = {"made_by": MADE_BY, **rec, "config": asdict(cfg),
           "source": {"path": str(Path(cfg.model).resolve()),
                      "fingerprint": checkpoint_fingerprint(cfg.model)},
           "chat_kwargs": task.chat_kwargs, "stop_ids": list(task.stop_ids),
           "weights": weights_fingerprint(model.float().cpu()), "cpu": cpu_model()}
    out = _write(Path(cfg.out), model, task, rec)
    Resume(partial_folder(out), "").clear()
    return out, rec


def _write(out: Path, model, task, record: dict) -> Path:
    """Save to a temporary folder beside ``out`` and rename it onto ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        model.to("cpu").save_pretrained(tmp)
        task.tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / RECORD, record)
        check_out(out, tmp)                       # still new, or still ours
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def sft_model_main(args) -> int:
    """``tailtheory sft --model PATH --out DIR``: warm-start, write, print how well and the next
    command. Exit status 0 inside the window, 1 outside it (the folder is written either way)."""
    if not args.out:
        print("tailtheory: error: sft --model needs --out DIR, a new folder for the warm-started "
              "checkpoint", file=sys.stderr)
        return 2
    kk = args.task.startswith("kk")
    kwargs = {} if args.n_people is None or (kk and args.n_people == 3) else \
        {"n_people": args.n_people}
    knobs = {k: v for k, v in (("lr", args.lr), ("batch_size", args.batch_size),
                               ("eval_every", args.eval_every), ("pool_size", args.pool_size))
             if v is not None}
    cfg = ModelSFTConfig(model=args.model, out=args.out, task=args.task, task_kwargs=kwargs,
                         max_steps=args.steps if args.steps is not None else
                         ModelSFTConfig.max_steps, threads=args.threads, **knobs)
    out, rec = sft_model(cfg, progress=not args.quiet)
    low, high = rec["window"]
    inside = "inside" if rec["in_window"] else "outside"
    print(f"{cfg.task}: {rec['steps']} steps, sampled accuracy {rec['accuracy']:.3f}, {inside} "
          f"the window [{low:.3f}, {high}] (stop: {rec['stop']}), {rec['seconds']:.0f} s\n{out}\n"
          f"next: tailtheory train --model {out} --task {cfg.task}"
          + (f" --n-people {args.n_people}" if kwargs else ""))
    if not rec["in_window"]:
        print(f"tailtheory: the warm start missed its window; give it more steps (--steps) or "
              f"another --lr; the folder is written for inspection", file=sys.stderr)
    return 0 if rec["in_window"] else 1
