"""How many CPU threads torch uses for a training command.

torch's default (one thread per core) loses badly when the cores are shared: measured side by side
in one process on a 2-core CPU, an RL step of the 0.72M-parameter warm-start model took 0.25 s on
one thread against 0.18 s on two when the machine was quiet, but 0.28 s against 0.76 s with one
other busy process (0.05 s against 0.34 s for the test model; 0.34 s against 0.78 s for a warm-start
step at batch 128), and single steps on two threads stalled for seconds. One thread costs at most
about 2x on an idle machine and wins 2-5x on a busy one, so small models on the CPU get one thread
unless ``--threads`` says otherwise.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

SMALL_MODEL_PARAMS = 10_000_000
"""Models up to this many parameters run on one CPU thread by default (measured at 0.72M)."""

TORCH_DEFAULT = torch.get_num_threads()
"""torch's own count when this module was imported (one per core, or ``OMP_NUM_THREADS``)."""


def default_threads(n_params: int, device: str | torch.device = "cpu") -> int:
    """1 for a model of ``n_params`` parameters on the CPU up to :data:`SMALL_MODEL_PARAMS`, else
    :data:`TORCH_DEFAULT` (a GPU step hardly uses CPU threads; large models keep every core)."""
    if torch.device(device).type == "cpu" and n_params <= SMALL_MODEL_PARAMS:
        return 1
    return TORCH_DEFAULT


def resolve_threads(threads: int, n_params: int, device: str | torch.device = "cpu") -> int:
    """``threads`` when it is positive, else (0) :func:`default_threads`."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads must be an integer >= 0 (0: automatic), got {threads!r}")
    return threads or default_threads(n_params, device)


@contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch intra-op threads; the previous count is restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)
