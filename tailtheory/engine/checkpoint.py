"""Checkpoints: model, optimiser, every RNG state, the step and the config, written atomically.

``RUN/checkpoint.pt`` is the latest step, written through a temporary file and ``os.replace``: a
crash mid-write leaves the previous checkpoint intact. Before it is replaced, the previous one is
hard-linked to ``RUN/checkpoint.prev.pt``, so a checkpoint damaged later (a full disk, a bad copy)
still leaves one to fall back to. ``RUN/metrics.jsonl`` is truncated back to the checkpoint's
step on resume, so an interrupted and resumed run writes exactly the lines of an uninterrupted one;
lines missing before that step cannot be made again from the checkpoint, so resume refuses them,
naming the gap, and :func:`read_metrics` refuses any file whose steps are not ``0 .. n-1``.

Loading never runs code: the file holds tensors and plain data only (RNG states as tensors and
lists, the config as a dict) and is read with ``torch.load(..., weights_only=True)``; a file that
needs anything else is refused with an error naming it.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shlex
import warnings
from pathlib import Path

import numpy as np
import torch

from tailtheory.core.io import atomic_write_bytes, atomic_write_text
from tailtheory.engine.config import ADDED_DEFAULTS, RESUME_FREE, TrainConfig

CHECKPOINT = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"
"""The checkpoint before the latest (kept as a fallback)."""
METRICS = "metrics.jsonl"
KEYS = ("step", "model", "optimizer", "rng", "config", "fingerprint")
"""What a checkpoint holds."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the way out."""


def rng_state(generator: torch.Generator) -> dict:
    """Every random state a step reads (sampler's generator, torch, numpy, python), as tensors,
    numbers and lists only, so that ``torch.load(weights_only=True)`` reads it back."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, mt, gauss_next = random.getstate()
    return {"generator": generator.get_state(), "torch": torch.get_rng_state(),
            "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                      "has_gauss": has_gauss, "gauss": gauss},
            "python": {"version": version, "state": list(mt), "gauss_next": gauss_next}}


def set_rng_state(state: dict, generator: torch.Generator) -> None:
    """Restore the sampler's ``generator`` and the global torch, numpy and Python RNGs."""
    generator.set_state(state["generator"])
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))


def save_checkpoint(run: Path, step: int, model, optimizer, generator: torch.Generator,
                    cfg: TrainConfig) -> Path:
    """Write ``RUN/checkpoint.pt`` atomically, the one before kept as ``RUN/checkpoint.prev.pt``;
    ``step`` is the number of steps completed."""
    import io

    buf = io.BytesIO()
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng_state(generator), "config": cfg.to_dict(),
                "fingerprint": cfg.fingerprint()}, buf)
    path = Path(run) / CHECKPOINT
    if path.exists():
        _keep_previous(path, Path(run) / PREVIOUS)
    return atomic_write_bytes(path, buf.getvalue())


def _keep_previous(path: Path, previous: Path) -> None:
    """Make ``previous`` a copy of ``path`` without a moment where either is missing or partial:
    a hard link (or a copy) under a temporary name, then ``os.replace``."""
    tmp = previous.with_name(f".{previous.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # a file system without hard links
        atomic_write_bytes(previous, path.read_bytes())
        return
    os.replace(tmp, previous)


def read_checkpoint(path: str | Path) -> dict:
    """The contents of a checkpoint file, read without running code; :class:`CheckpointError`
    (naming the file, and the previous checkpoint if there is one) when it cannot be used."""
    path = Path(path)
    try:
        with warnings.catch_warnings():  # torch's notes on foreign pickles: the error says it
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # torch's refusal names the global it would call
        called = [ln.strip() for ln in str(exc).splitlines() if "GLOBAL" in ln][:1]
        why = ("it holds more than tensors and plain data (crafted so that loading it could run "
               "code, or damaged), so it was not loaded" + (f": {called[0]}" if called else ""))
        raise CheckpointError(_unusable(path, why)) from None
    except Exception as exc:  # noqa: BLE001 - truncated zip, bad header, I/O error: one message
        raise CheckpointError(_unusable(path, f"truncated or corrupted ({_first_line(exc)})")) \
            from None
    if not isinstance(state, dict) or not set(KEYS) <= set(state):
        raise CheckpointError(_unusable(path, f"not a tailtheory checkpoint (needs keys {KEYS})"))
    return state


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def _unusable(path: Path, why: str) -> str:
    previous = path.with_name(PREVIOUS)
    way_out = (f"; the previous checkpoint is kept: to resume from it, run "
               f"`mv {previous} {path}` and --resume again" if previous.exists() and
               path.name == CHECKPOINT else "")
    return f"cannot use checkpoint {path}: {why}{way_out}"


def load_checkpoint(run: Path, cfg: TrainConfig, allow_none: bool = False) -> dict | None:
    """Read ``RUN/checkpoint.pt`` and check it was written by a run of the same config.

    ``allow_none``: a run stopped before its first checkpoint gives None (after checking its
    ``config.json``, if written, against ``cfg``) instead of an error.
    """
    path = Path(run) / CHECKPOINT
    if not path.exists():
        saved = Path(run) / "config.json"
        if not allow_none:
            raise ValueError(f"--resume: no checkpoint at {path}")
        diff = config_diff(json.loads(saved.read_text()), cfg) if saved.exists() else {}
        if diff:
            raise ValueError(f"--resume: {run} was started by a different config; differing "
                             f"fields (run, now): {diff}")
        return None
    ckpt = read_checkpoint(path)
    if ckpt["fingerprint"] != cfg.fingerprint():
        raise ValueError(f"--resume: {run} was written by a different config; differing fields "
                         f"(checkpoint, now): {config_diff(ckpt['config'], cfg)}")
    return ckpt


def config_diff(saved: dict, cfg: TrainConfig) -> dict:
    """Fields (outside :data:`RESUME_FREE`) where ``saved`` and ``cfg`` differ: ``(saved, now)``."""
    saved = {**ADDED_DEFAULTS, **saved}  # a field added later holds its default in older runs
    return {k: (saved.get(k), v) for k, v in cfg.to_dict().items()
            if k not in RESUME_FREE and saved.get(k) != v}


def parse_metrics(text: str, path: Path) -> tuple[list[tuple[str, dict]], bool]:
    """The ``(line, record)`` pairs of a ``metrics.jsonl`` text and whether its last line was torn
    (unterminated and not JSON: the write of a process killed mid-append). Any other bad line is
    an error."""
    lines = text.split("\n")
    records, torn = [], False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append((line, json.loads(line)))
        except ValueError:
            if i != len(lines) - 1:  # terminated by a newline: written whole, so corrupted
                raise ValueError(f"{path}: line {i + 1} is not JSON (corrupted file)") from None
            torn = True
    return records, torn


class MetricsGapError(ValueError):
    """A ``metrics.jsonl`` whose steps are not ``0 .. n-1`` in order; the message names the gap."""


def _spans(steps) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    out, steps = [], sorted(steps)
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def step_gap(steps: list, upto: int | None = None) -> str | None:
    """What keeps ``steps`` from being ``0 .. n-1`` in order (``n = upto`` when given, else one
    past the largest step): e.g. ``"step(s) 19 missing (the lines hold 0-18, 20-21)"``; None when
    they are."""
    if not all(isinstance(s, int) for s in steps):
        return "a line without an integer step"
    n = (max(steps, default=-1) + 1) if upto is None else upto
    if steps == list(range(n)):
        return None
    held = f"the lines hold {_spans(set(steps)) or 'none'}"
    missing = sorted(set(range(n)) - set(steps))
    if missing:
        return f"step(s) {_spans(missing)} missing ({held})"
    return f"steps repeated or out of order ({held})"


def read_metrics(run: str | Path) -> list[dict]:
    """The records of ``RUN/metrics.jsonl``, less a torn last line; :class:`MetricsGapError` when
    their steps are not ``0 .. n-1`` in order (a file that lost lines is never read as a curve)."""
    path = Path(run) / METRICS
    records = [m for _, m in parse_metrics(path.read_text(), path)[0]]
    gap = step_gap([m.get("step") for m in records])
    if gap:
        raise MetricsGapError(f"{path}: {gap}; a run's lines are steps 0, 1, 2 ... without holes: "
                              f"restore the file, or train the run again into a new --out (a run "
                              f"of the run cache: delete its folder and it is trained again)")
    return records


def _gap_fix(run: Path, first_missing: int) -> str:
    """The way out of a metrics gap before the checkpoint: the previous checkpoint if it
    precedes the gap (its steps are then genuinely re-run), else training from step 0."""
    ckpt, prev = run / CHECKPOINT, run / PREVIOUS
    try:
        prev_step = read_checkpoint(prev)["step"] if prev.exists() else None
    except CheckpointError:
        prev_step = None
    if prev_step is not None and prev_step <= first_missing:
        return (f"the previous checkpoint (step {prev_step}) precedes the gap: resume from it with "
                f"`mv {shlex.quote(str(prev))} {shlex.quote(str(ckpt))}` and --resume again")
    rm = " ".join(shlex.quote(str(p)) for p in (ckpt, prev) if p.exists())
    return (f"restore the file, or train the run again from step 0 (`rm {rm}`, then --resume "
            f"again) or into a new --out")


def truncate_metrics(run: Path, step: int) -> str | None:
    """Keep only the metric lines of steps ``< step`` (those the checkpoint includes) and drop a
    torn last line. Returns a one-line note of what was dropped, or None. Lines missing before
    ``step`` cannot be made again from the checkpoint: :class:`MetricsGapError` naming them and
    the way out, and the file is left as it is."""
    path = Path(run) / METRICS
    records, torn = parse_metrics(path.read_text(), path) if path.exists() else ([], False)
    before = [(line, m) for line, m in records
              if not isinstance(m.get("step"), int) or m["step"] < step]
    kept = [line for line, _ in before]
    gap = step_gap([m.get("step") for _, m in before], upto=step)
    if gap:
        first = min(set(range(step)) - {m.get("step") for _, m in records}, default=0)
        raise MetricsGapError(f"--resume: {path}: {gap} before the checkpoint's step {step}; those "
                              f"lines cannot be made again from this checkpoint, so nothing was "
                              f"run and the file is unchanged: {_gap_fix(Path(run), first)}")
    if not path.exists():
        return None
    atomic_write_text(path, "".join(line + "\n" for line in kept))
    past = len(records) - len(kept)
    if not (past or torn):
        return None
    torn_note = (" and a line torn by an interrupted write" if torn else "")
    return (f"{path}: dropped {past} line(s) past the checkpoint's step {step}{torn_note}; "
            f"those steps run again")


def append_metrics(run: Path, metrics: dict) -> None:
    """Append one JSON line (flushed and synced: a crash loses at most the line being written)."""
    with open(Path(run) / METRICS, "a") as f:
        f.write(json.dumps(metrics, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
