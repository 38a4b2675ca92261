"""Where the engine runs: ``auto`` (a CUDA GPU when one is visible, else the CPU), ``cpu`` or
``cuda``. Asking for ``cuda`` on a machine without one is an error, never a silent CPU run.

On a GPU the trainer and the rollout copies live on the device; the ``bf16`` / ``fp16`` / ``fp8``
rollout copies then mismatch the float32 trainer through the GPU's own kernels (a real mismatch
source, as in the large runs the papers describe).
"""

from __future__ import annotations

import torch

DEVICES = ("auto", "cpu", "cuda")
"""The values of ``--device``."""


def resolve_device(name: str) -> str:
    """``"cpu"`` or ``"cuda"`` for ``name`` in :data:`DEVICES`; a ``ValueError`` otherwise, and for
    ``cuda`` when no CUDA GPU is visible."""
    if name not in DEVICES:
        raise ValueError(f"unknown device {name!r}; valid devices: {', '.join(DEVICES)}")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA GPU on this machine "
                         f"(torch {torch.__version__}, cuda build: {torch.version.cuda or 'no'}); "
                         "use --device cpu, or --device auto to take a GPU when there is one")
    return name


def model_generator(model, seed: int) -> torch.Generator:
    """A ``torch.Generator`` seeded ``seed`` on the device of ``model``'s parameters: the one a
    sampler on that device takes (on the CPU the same stream as ``torch.Generator()``)."""
    return torch.Generator(next(model.parameters()).device).manual_seed(int(seed))
