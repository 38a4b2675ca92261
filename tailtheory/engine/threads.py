"""How many CPU threads torch uses for a training command.

torch's default (one thread per core) loses badly when the cores are shared. Measured side by side
in one process on a 2-core CPU (median of 5 interleaved steps, one thread against two), a GRPO
step (8 prompts x 8) of the 0.72M-parameter warm-start model took 0.33 s against 0.21 s on an
otherwise idle machine, but 0.33 s against 0.67 s beside one busy process, and 0.26 s against
7.8 s with several other jobs running; a warm-start step (batch 128) 0.43 s against 0.25 s idle,
0.44 s against 1.02 s beside one busy process. One thread costs at most about 1.7x on an idle
machine and wins 2-30x on a shared one, so small models on the CPU get one thread unless
``--threads`` says otherwise.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from tailtheory.core.models import TORCH_DEFAULT, num_params

SMALL_MODEL_PARAMS = 10_000_000
"""Models up to this many parameters run on one CPU thread by default (measured at 0.72M)."""

_PINNED: list[int] = []
"""The counts of the :func:`pinned_threads` blocks now open, innermost last."""


def default_threads(n_params: int, device: str | torch.device = "cpu") -> int:
    """1 for a model of ``n_params`` parameters on the CPU up to :data:`SMALL_MODEL_PARAMS`, else
    :data:`TORCH_DEFAULT` (a GPU step hardly uses CPU threads; large models keep every core)."""
    if torch.device(device).type == "cpu" and n_params <= SMALL_MODEL_PARAMS:
        return 1
    return TORCH_DEFAULT


def check_threads(threads: int) -> int:
    """``threads`` when it is a count (an integer >= 0; 0: automatic), else a ``ValueError``."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads must be an integer >= 0 (0: automatic), got {threads!r}")
    return threads


def resolve_threads(threads: int, n_params: int, device: str | torch.device = "cpu") -> int:
    """``threads`` when it is positive, else (0) the count of the innermost open
    :func:`pinned_threads` block, else :func:`default_threads`."""
    return check_threads(threads) or (_PINNED[-1] if _PINNED else
                                      default_threads(n_params, device))


@contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch intra-op threads; the previous count is restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


@contextmanager
def pinned_threads(n: int):
    """Run the block with ``n`` torch threads (``n`` >= 1) and make every automatic choice made
    inside it (:func:`model_threads`, :func:`resolve_threads` with 0) take ``n`` as well: what a
    command's ``--threads`` means for everything it calls. Without it, a measurement that picks
    its own count for a model above :data:`SMALL_MODEL_PARAMS` would take every core under a
    caller that asked for one (measured: LOPTI's probes of an 11M-parameter model took 2,868 s
    a seed beside a busy process, and 373-454 s pinned to one thread)."""
    if check_threads(n) < 1:
        raise ValueError(f"pinned threads must be >= 1, got {n!r}")
    _PINNED.append(n)
    try:
        with torch_threads(n):
            yield n
    finally:
        _PINNED.pop()


@contextmanager
def model_threads(model, threads: int = 0):
    """Run the block with the thread count a command picks for ``model``: ``threads`` when
    positive, else :func:`resolve_threads`'s choice for its parameter count and device (an open
    :func:`pinned_threads` block's count, or one thread for a small model on the CPU). The
    previous count is restored after.

    What the measurements that run a small model outside a command use (LOPTI's probes in a
    notebook, for one): measured on this 2-core CPU beside two busy processes, the quick probe
    took 198 s on torch's two threads and 16 s on one (7.7 s on an idle machine)."""
    device = next(model.parameters()).device
    with torch_threads(resolve_threads(threads, num_params(model), device)) as n:
        yield n
