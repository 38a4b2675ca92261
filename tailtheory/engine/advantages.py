"""Group advantages of the GRPO engine: GRPO, Dr. GRPO and RLOO.

Source: GRPO (group mean and std), Dr. GRPO (group mean, no std), RLOO (leave-one-out mean), as
compared in OTB (Li et al., arXiv 2602.07078). The ``grpo`` and ``dr_grpo`` losses of the method
registry (:mod:`tailtheory.engine.registry`, the one registry of advantages: a loss's own group
advantage, or an ``advantage``-stage method such as OTB's ``otb``) take theirs from here.

Notation: a batch of ``B`` responses in groups (one group per prompt, ids ``group_ids``), ``T``
positions, alive mask ``m`` (False after EOS and in padding), outcome reward ``R`` (B,).
Every advantage function returns ``(B, T)`` with zeros at dead positions. Group of one: GRPO
with ``std=True`` and RLOO raise (no spread, no leave-one-out mean), Dr. GRPO gives 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tailtheory.core.checks import as_tensor, check_finite, check_mask

GRPO_EPS = 1e-6
"""Added to the group std by GRPO: the ``epsilon`` default of verl's
``compute_grpo_outcome_advantage``."""


# --- input checks shared by the advantage functions --------------------------------------------

def alive_mask(mask: Any, B: int | None = None, by: str = "rewards") -> torch.Tensor:
    """A non-empty ``(B, T)`` mask (the package's mask rule), ``B`` as set by ``by``."""
    m = torch.as_tensor(np.asarray(mask)) if not isinstance(mask, torch.Tensor) else mask
    if m.ndim != 2 or (B is not None and m.shape[0] != B):
        from_ = f" = {B}, the length of {by}" if B is not None else ""
        raise ValueError(f"mask must have shape (B, T) with B{from_}; got {tuple(m.shape)}")
    return check_mask(m, m)


def group_index(group_ids: Any, B: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inv, counts)``: the group of each response (0..n_groups-1) and each group's size.

    ``group_ids`` may be any labels (ints, strings) of shape ``(B,)``.
    Shapes: group_ids (B,) -> inv (B,) long, counts (n_groups,) long.
    """
    ids = group_ids.detach().cpu().numpy() if isinstance(group_ids, torch.Tensor) else group_ids
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.shape[0] != B:
        raise ValueError(f"group_ids must have shape ({B},) to match the batch, got {ids.shape}")
    _, inv = np.unique(ids, return_inverse=True)
    dev = group_ids.device if isinstance(group_ids, torch.Tensor) else None
    inv = torch.as_tensor(inv.reshape(-1), dtype=torch.long, device=dev)   # on the batch's device
    return inv, torch.bincount(inv)


def _outcome_rewards(rewards: Any, mask: Any) -> tuple[torch.Tensor, torch.Tensor]:
    r = check_finite(as_tensor(rewards, "rewards"), "rewards")
    if r.ndim != 1:
        raise ValueError(f"rewards must be one outcome reward per response (B,), got "
                         f"{tuple(r.shape)}")
    return r, alive_mask(mask, r.shape[0])


# --- group baselines ---------------------------------------------------------------------------

def _group_mean(r: torch.Tensor, inv: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    sums = torch.zeros(counts.numel(), dtype=r.dtype, device=r.device).index_add_(0, inv, r)
    return (sums / counts)[inv]                                          # (B,)


def grpo_advantages(rewards: Any, group_ids: Any, mask: Any, std: bool = True,
                    eps: float = GRPO_EPS) -> torch.Tensor:
    """GRPO: the outcome reward minus its group mean, divided by the group std.

    Source: GRPO as compared in OTB. Formula: ``A^i = (R^i - mean_g R) / (std_g R + eps)``
    (unbiased std, as ``torch.std``), broadcast to alive positions. ``std=False`` is Dr. GRPO.
    A group of one has no std: with ``std=True`` it raises; so does an ``eps`` that is negative
    (``std + eps`` could vanish) or not finite.
    Shapes: rewards (B,), group_ids (B,), mask (B, T) -> (B, T).
    """
    if not (isinstance(eps, (int, float)) and 0 <= float(eps) < float("inf")):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    r, m = _outcome_rewards(rewards, mask)
    inv, counts = group_index(group_ids, r.shape[0])
    adv = r - _group_mean(r, inv, counts)                                # (B,)
    if std:
        if (counts < 2).any():
            raise ValueError(f"group_ids has {int((counts < 2).sum())} group(s) of a single "
                             f"response: its std is undefined (use std=False or larger groups)")
        sq = torch.zeros(counts.numel(), dtype=r.dtype, device=r.device).index_add_(0, inv, adv**2)
        sd = (sq / (counts - 1)).sqrt()[inv]                             # (B,)
        adv = adv / (sd + eps)
    return adv[:, None] * m


def dr_grpo_advantages(rewards: Any, group_ids: Any, mask: Any) -> torch.Tensor:
    """Dr. GRPO: the outcome reward minus its group mean, no std (a group of one gets 0).

    Source: Dr. GRPO as compared in OTB. Formula: ``A^i = R^i - mean_g R``.
    Shapes: rewards (B,), group_ids (B,), mask (B, T) -> (B, T).
    """
    return grpo_advantages(rewards, group_ids, mask, std=False)


def rloo_advantages(rewards: Any, group_ids: Any, mask: Any) -> torch.Tensor:
    """RLOO: the outcome reward minus the mean of the other responses of its group.

    Source: RLOO as compared in OTB (O5). Formula: ``A^i = R^i - mean_{j != i} R^j
    = N/(N-1) (R^i - mean_g R)``. A group of one has no other response: it raises.
    Shapes: rewards (B,), group_ids (B,), mask (B, T) -> (B, T).
    """
    r, m = _outcome_rewards(rewards, mask)
    inv, counts = group_index(group_ids, r.shape[0])
    if (counts < 2).any():
        raise ValueError(f"group_ids has {int((counts < 2).sum())} group(s) of a single "
                         f"response: RLOO needs at least two per group")
    n = counts[inv].to(r.dtype)
    adv = n / (n - 1) * (r - _group_mean(r, inv, counts))
    return adv[:, None] * m
