"""Response lengths: how long a task's targets and a policy's sampled responses are.

The tail and mismatch effects grow with the number of sampled tokens per response (a tail token
drawn many times, ``log_rho`` summed along the sequence), so a task's length distribution is part
of its description. Length counts response tokens up to and including the first ``<eos>``; a
response that never ends counts its full ``max_new_tokens``.

Quantiles interpolate linearly between order statistics (``torch.quantile``'s default).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.engine.rollout.engine import HF, RolloutConfig, RolloutEngine
from tailtheory.engine.tasks.task import Problem, Task


@dataclass(frozen=True)
class LengthStats:
    """Summary of response lengths (tokens, ``<eos>`` included)."""

    n: int
    median: float
    p90: float
    max: int
    mean: float
    ended: float
    """Fraction of responses that emitted ``<eos>`` (1.0 for targets)."""


def length_stats(lengths, ended=None) -> LengthStats:
    """Median, 90th percentile, max and mean of ``lengths`` (B,); ``ended`` (B,) bool or None."""
    L = torch.as_tensor(list(lengths), dtype=torch.float64)                # (B,)
    if L.ndim != 1 or L.numel() == 0:
        raise ValueError(f"lengths must be a non-empty 1-D sequence, got shape {tuple(L.shape)}")
    if (L < 0).any() or (L != L.round()).any():
        raise ValueError("lengths must be non-negative integers")
    e = torch.ones_like(L) if ended is None else torch.as_tensor(list(ended), dtype=torch.float64)
    if e.shape != L.shape:
        raise ValueError(f"ended must have the shape of lengths {tuple(L.shape)}, got "
                         f"{tuple(e.shape)}")
    return LengthStats(n=L.numel(), median=L.quantile(0.5).item(), p90=L.quantile(0.9).item(),
                       max=int(L.max()), mean=L.mean().item(), ended=e.mean().item())


def target_lengths(task: Task, problems: list[Problem]) -> list[int]:
    """Lengths of the supervised targets (``task.target_ids``, ``<eos>`` included)."""
    return [len(task.target_ids(p)) for p in problems]


@torch.no_grad()
def sampled_lengths(model, task: Task, problems: list[Problem], temperature: float = 1.0,
                    seed: int = 0, max_new_tokens: int = 0) -> tuple[list[int], list[bool]]:
    """``(lengths, ended)`` of one response per problem, sampled by ``model`` (float32 ``kv``
    path, the ``hf`` decoder) with at most ``max_new_tokens`` tokens (0: ``task.max_response_len``)."""
    T = check_positive_int(max_new_tokens, "max_new_tokens", minimum=0) or task.max_response_len
    device = next(model.parameters()).device
    eng = RolloutEngine(model, RolloutConfig(path="kv", temperature=temperature, max_new_tokens=T,
                                             backend=HF))
    rb = eng.generate([p.prompt_ids for p in problems], eos_id=task.stop_ids, pad_id=task.pad_id,
                      generator=torch.Generator(device).manual_seed(seed))
    ended = (torch.isin(rb.response, torch.tensor(task.stop_ids)) & rb.mask).any(1)  # (B,)
    return rb.mask.sum(1).tolist(), ended.tolist()


def response_length_stats(model, task: Task, n: int = 256, seed: int = 0,
                          temperature: float = 1.0) -> LengthStats:
    """:class:`LengthStats` of ``model``'s sampled responses to ``n`` problems of generator seed
    ``seed`` (the same problems for every model)."""
    lengths, ended = sampled_lengths(model, task, task.problems(n, seed=seed), temperature, seed)
    return length_stats(lengths, ended)
