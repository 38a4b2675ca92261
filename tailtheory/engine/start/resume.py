"""Checkpoints of a long build, so that a build stopped part-way continues where it stopped.

The larger rungs of the model-size ladder take hours to pretrain and warm-start on a CPU, longer
than one sitting; a killed process would otherwise lose all of it. A :class:`Resume` saves the
training state (weights, optimizer, learning-rate schedule, the batch sampler's random state,
the history so far and the seconds spent) every :data:`CHECKPOINT_SECONDS` into
``<cache>/<key>.partial/``, and a later build of the same key continues from it. The continued
build takes the same batches in the same order as one that never stopped, so on one machine it
ends with the same weights (tested); its record says from which step it continued.

A checkpoint is read with ``torch.load(weights_only=True)``, which loads tensors and plain
containers and never runs code. A checkpoint of another identity (the cache key and a digest of
the training data), or one that cannot be read, is set aside with a warning and the build
starts over; the folder is removed once the build is saved.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import torch

from tailtheory.core.io import atomic_write_bytes, atomic_write_json

CHECKPOINT_SECONDS = 300.0
"""Seconds of training between two checkpoints (a write of the weights and two Adam moments)."""

STATE = "state.pt"
"""The checkpoint file inside a ``.partial`` folder."""

PROGRESS = "progress.json"
"""Beside it: the step and seconds of the last checkpoint (what ``tailtheory ladder status``
reads without loading the checkpoint)."""


def partial_folder(final: Path) -> Path:
    """The checkpoint folder of the cache entry ``final``: ``<key>.partial`` beside it."""
    return final.with_name(final.name + ".partial")


def progress(final: Path) -> dict | None:
    """The last checkpoint's step and seconds of the build of ``final`` (None: no checkpoint)."""
    try:
        out = json.loads((partial_folder(final) / PROGRESS).read_text())
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) and isinstance(out.get("step"), int) else None


def digest(*tensors: torch.Tensor) -> str:
    """A short SHA-256 of the tensors' bytes: what a checkpoint's identity adds to the cache key,
    so that a checkpoint of other training data (another tokenizer, another corpus) never
    continues."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


class Resume:
    """Save and restore one build's training state (module docstring).

    ``folder``: the ``.partial`` folder (None: never checkpoint); ``identity``: a string that
    must match for a checkpoint to be continued; ``every``: seconds between checkpoints
    (default :data:`CHECKPOINT_SECONDS`)."""

    def __init__(self, folder: Path | None, identity: str, every: float | None = None,
                 progress: bool = True):
        every = CHECKPOINT_SECONDS if every is None else every
        if every < 0:
            raise ValueError(f"every must be >= 0 seconds, got {every}")
        self.folder, self.identity, self.every, self.progress = folder, identity, every, progress
        self.resumed_from, self.resumed_seconds = 0, 0.0
        self._last = time.perf_counter()

    @property
    def path(self) -> Path | None:
        return None if self.folder is None else self.folder / STATE

    def restore(self, model, opt, generator: torch.Generator, sched=None) -> tuple[int, list, float]:
        """Load a matching checkpoint into ``model``, ``opt``, ``generator`` (and ``sched``);
        returns ``(steps done, history, seconds spent)``, ``(0, [], 0.0)`` when there is none."""
        path = self.path
        if path is None or not path.exists():
            return 0, [], 0.0
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if state.get("identity") != self.identity:
                raise ValueError("it belongs to other training data or another config")
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            generator.set_state(state["rng"])
            if sched is not None:
                sched.load_state_dict(state["sched"])
        except Exception as e:                      # a torn or foreign file: start over, say so
            warnings.warn(f"the checkpoint {path} is not continued ({e}); starting over",
                          RuntimeWarning, stacklevel=2)
            self.clear()
            return 0, [], 0.0
        self.resumed_from, self.resumed_seconds = int(state["step"]), float(state["seconds"])
        if self.progress:
            print(f"continuing from step {self.resumed_from} ({path})", file=sys.stderr)
        return self.resumed_from, list(state["history"]), float(state["seconds"])

    def maybe_save(self, step: int, model, opt, generator: torch.Generator, history: list,
                   seconds: float, sched=None) -> bool:
        """Checkpoint after ``step`` when :attr:`every` seconds have passed since the last one;
        True when it wrote."""
        if self.folder is None or time.perf_counter() - self._last < self.every:
            return False
        state = {"identity": self.identity, "step": step, "seconds": seconds,
                 "history": history, "model": model.state_dict(), "opt": opt.state_dict(),
                 "rng": generator.get_state(),
                 "sched": sched.state_dict() if sched is not None else None}
        buf = io.BytesIO()
        torch.save(state, buf)
        atomic_write_bytes(self.path, buf.getvalue())
        atomic_write_json(self.folder / PROGRESS, {"step": step, "seconds": round(seconds, 1),
                                                   "saved": time.strftime("%Y-%m-%d %H:%M:%S")})
        self._last = time.perf_counter()
        return True

    def clear(self) -> None:
        """Remove the checkpoint folder (after the build is saved, or when it is set aside)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
