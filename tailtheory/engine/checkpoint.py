"""Checkpoints: model, optimiser, every RNG state, the step and the config, written atomically.

One file ``RUN/checkpoint.pt`` (the latest good step) written through a temporary file and
``os.replace``: a crash mid-write leaves the previous checkpoint intact. ``RUN/metrics.jsonl``
is truncated back to the checkpoint's step on resume, so an interrupted and resumed run writes
exactly the lines of an uninterrupted one.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import torch

from tailtheory.core.io import atomic_write_bytes, atomic_write_text
from tailtheory.engine.config import RESUME_FREE, TrainConfig

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"


def rng_state(generator: torch.Generator) -> dict:
    """Every random state a step reads: the sampler's generator, torch, numpy, python."""
    return {"generator": generator.get_state(), "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict, generator: torch.Generator) -> None:
    """Restore the sampler's ``generator`` and the global torch, numpy and Python RNGs."""
    generator.set_state(state["generator"])
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(run: Path, step: int, model, optimizer, generator: torch.Generator,
                    cfg: TrainConfig) -> Path:
    """Write ``RUN/checkpoint.pt`` atomically; ``step`` is the number of steps completed."""
    buf = io.BytesIO()
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng_state(generator), "config": cfg.to_dict(),
                "fingerprint": cfg.fingerprint()}, buf)
    return atomic_write_bytes(Path(run) / CHECKPOINT, buf.getvalue())


def load_checkpoint(run: Path, cfg: TrainConfig) -> dict:
    """Read ``RUN/checkpoint.pt`` and check it was written by a run of the same config."""
    path = Path(run) / CHECKPOINT
    if not path.exists():
        raise ValueError(f"--resume: no checkpoint at {path}")
    ckpt = torch.load(path, weights_only=False)
    if ckpt["fingerprint"] != cfg.fingerprint():
        diff = {k: (ckpt["config"].get(k), v) for k, v in cfg.to_dict().items()
                if k not in RESUME_FREE and ckpt["config"].get(k) != v}
        raise ValueError(f"--resume: {run} was written by a different config; differing fields "
                         f"(checkpoint, now): {diff}")
    return ckpt


def truncate_metrics(run: Path, step: int) -> None:
    """Keep only the metric lines of steps ``< step`` (those the checkpoint includes)."""
    path = Path(run) / METRICS
    if not path.exists():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    kept = [ln for ln in lines if json.loads(ln)["step"] < step]
    atomic_write_text(path, "".join(ln + "\n" for ln in kept))


def append_metrics(run: Path, metrics: dict) -> None:
    """Append one JSON line (flushed and synced: a crash loses at most the line being written)."""
    import os

    with open(Path(run) / METRICS, "a") as f:
        f.write(json.dumps(metrics, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
