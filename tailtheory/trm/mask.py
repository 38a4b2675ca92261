"""Trust Region Masking: keep a sequence only when every step stayed inside the trust region.

Source: TRM (T12). Li et al., *Trust Region Masking for Long-Horizon LLM Reinforcement
Learning*, arXiv 2512.23075.

- max criterion: keep iff ``max_t D_KL(c_t) <= delta_max`` (the quantity ``delta`` of T2-T7,
  so the bounds apply to every kept sequence);
- avg criterion: keep iff ``(1/T) sum_t D_KL(c_t) <= delta_avg`` (``T`` = the sequence's own
  length, its alive tokens);
- both: the two at once.

``D_KL(c_t) = KL(pi_roll(.|c_t) || pi_theta(.|c_t))`` needs both full logit sets. With only the
sampled token's log-ratio ``log rho_t`` the max filter uses ``k2 = (log rho)^2 / 2`` and the
average uses ``k3 = rho - 1 - log rho`` (unbiased for the KL under ``pi_roll``, ``>= 0``).
The filter, :func:`trm_mask`, and the estimators live in :mod:`tailtheory.core.estimators`
(the GRPO engine's acceptance monitor reads them too); this module names the filter
``trm_mask``.
Rejected sequences contribute zero and the loss divides by the **total** number of sequences.
Length bias: with i.i.d. per-token violation rate ``q``, ``P(accept) = (1 - q)^T``.

Shapes: per-token (B, T) with a mask (B, T); per-sequence (B,).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import (as_tensor, check_finite, check_mask, check_positive_int,
                                    check_unit_interval)
from tailtheory.core.estimators import trust_region_keep

trm_mask = trust_region_keep
"""T12: ``(B,)`` bool, True for the sequences TRM keeps (the filter of
:func:`tailtheory.core.estimators.trust_region_keep`, which the engine's acceptance monitor
reads too). Shapes: mask, kl / log_ratio (B, T) -> (B,)."""


def trm_masked_loss(tok_loss, mask, keep) -> tuple[torch.Tensor, dict[str, float]]:
    """T12: ``(1/B) sum_b keep_b sum_t mask_bt tok_loss_bt``: rejected sequences add zero and
    the denominator is the total number of sequences ``B``, not the number kept.

    An empty batch (``B = 0``) raises: the mean over sequences is undefined.
    Returns ``(loss, metrics)`` with ``trm/accept_rate``. Shapes: tok_loss, mask (B, T); keep (B,).
    """
    x = check_finite(as_tensor(tok_loss, "tok_loss", dtype=None), "tok_loss")
    if x.ndim != 2:
        raise ValueError(f"tok_loss must have shape (B, T), got {tuple(x.shape)}")
    if x.shape[0] == 0:
        raise ValueError("tok_loss has an empty batch (B = 0): the loss divides by the number of "
                         "sequences")
    m = check_mask(mask, x, "mask", allow_empty=True, like_name="tok_loss")
    k = keep if isinstance(keep, torch.Tensor) else torch.as_tensor(keep)
    if k.shape != (x.shape[0],):
        raise ValueError(f"keep must have shape (B,) = ({x.shape[0]},), got {tuple(k.shape)}")
    k = check_mask(k, k, "keep", allow_empty=True)
    per_seq = torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(-1)  # (B,)
    loss = torch.where(k, per_seq, torch.zeros((), dtype=x.dtype, device=x.device)).sum() / x.shape[0]
    return loss, {"trm/accept_rate": k.double().mean().item()}


def acceptance_prob(q, T: int) -> torch.Tensor:
    """T12 length bias: ``P(accept) = (1 - q)^T`` for i.i.d. per-token violation rate ``q``."""
    T = check_positive_int(T, "T")
    return (1.0 - check_unit_interval(as_tensor(q, "q"), "q")) ** T


def simulate_acceptance(q: float, T: int, B: int, seed: int = 0) -> float:
    """The max filter's acceptance rate on ``B`` simulated sequences of ``T`` tokens whose
    per-token KL exceeds ``delta_max`` independently with probability ``q``."""
    T, B = check_positive_int(T, "T"), check_positive_int(B, "B")
    q = float(check_unit_interval(as_tensor(q, "q"), "q"))
    g = torch.Generator().manual_seed(seed)
    violated = torch.rand(B, T, generator=g, dtype=torch.float64) < q   # (B, T)
    kl = violated.double() * 2.0                                        # 2 > delta_max = 1
    keep = trm_mask(torch.ones(B, T, dtype=torch.bool), "max", kl=kl, delta_max=1.0)
    return keep.double().mean().item()


__all__ = ["trm_mask", "trm_masked_loss", "acceptance_prob", "simulate_acceptance"]
