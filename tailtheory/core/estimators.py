"""Per-token KL estimators of a sampled log-ratio, and the per-sequence filter built on them.

Source: TIM (Zhong et al., arXiv 2605.14220) for ``k1``, ``k2``, ``k3`` of ``log rho`` with
``rho = pi_theta / pi_roll`` of the sampled token; TRM (Li et al., *Trust Region Masking for
Long-Horizon LLM Reinforcement Learning*, arXiv 2512.23075; T12) for the sequence filter.

Both are read by several layers: the engine's mismatch monitors and TRM acceptance monitor,
the ``trm`` method, TRM's and TIM's claims, the diagnostics and the integrations; so they live
here, below all of them. ``tailtheory.mismatch.logprob`` and ``tailtheory.trm.mask`` keep
their names importable.

- ``k1 = -log rho``: unbiased for ``KL(pi_roll || pi_theta)`` on tokens sampled from
  ``pi_roll``; can be negative.
- ``k2 = (log rho)^2 / 2``: biased, ``>= 0``.
- ``k3 = rho - 1 - log rho``: unbiased for the same KL and ``>= 0``.

The filter (T12) keeps a sequence when its per-token divergence stays inside a trust region:
``max_t d_t <= delta_max`` (``max``), ``(1/T) sum_t d_t <= delta_avg`` over its own alive
tokens (``avg``), or both. With exact per-token KLs ``d`` is that KL; with only the sampled
token's ``log rho``, the max filter reads ``k2`` and the average ``k3``.

Shapes: per-token (B, T) with a mask (B, T); per-sequence (B,).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import as_tensor, check_finite, check_mask, check_nonneg

CRITERIA = ("max", "avg", "both")
"""The filtering criteria of :func:`trust_region_keep` (TRM's T12)."""


# --- per-token estimators ------------------------------------------------------------------------

def _log_ratio(log_ratio) -> torch.Tensor:
    return check_finite(as_tensor(log_ratio, "log_ratio"), "log_ratio")


def k1(log_ratio) -> torch.Tensor:
    """``k1 = -log rho`` with ``rho = pi_theta / pi_roll`` of the sampled token.

    Source: TIM / TRM (T12). Unbiased for ``KL(pi_roll || pi_theta)`` when tokens come from
    ``pi_roll``; can be negative. With trainer ``pi_theta`` and engine ``pi_roll``,
    ``log rho = -Delta`` so ``k1 = Delta`` (the sign convention of ``tailtheory.mismatch``).

    Shapes: log_ratio (...) -> (...).
    """
    return -_log_ratio(log_ratio)


def k2(log_ratio) -> torch.Tensor:
    """``k2 = (log rho)^2 / 2``: biased, ``>= 0``; TRM's max filter. Source: TRM (T12).

    Shapes: log_ratio (...) -> (...).
    """
    return 0.5 * _log_ratio(log_ratio) ** 2


def k3(log_ratio) -> torch.Tensor:
    """``k3 = rho - 1 - log rho``: unbiased for ``KL(pi_roll || pi_theta)`` under ``pi_roll`` and
    ``>= 0``. Source: TIM / TRM (T12). ``expm1`` keeps it accurate for small ``log rho``.

    Shapes: log_ratio (...) -> (...).
    """
    r = _log_ratio(log_ratio)
    return torch.expm1(r) - r


# --- the per-sequence filter (T12) ---------------------------------------------------------------

def _token_divergences(mask, kl, log_ratio) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mask, d_max, d_avg)``: per-token divergences the max and avg filters read."""
    if (kl is None) == (log_ratio is None):
        raise ValueError("give exactly one of kl (exact per-token KL) and log_ratio "
                         "(sampled-token log rho)")
    if kl is not None:
        d = check_nonneg(as_tensor(kl, "kl"), "kl")
        d_max, d_avg, name = d, d, "kl"
    else:
        lr = check_finite(as_tensor(log_ratio, "log_ratio"), "log_ratio")
        d_max, d_avg, name = k2(lr), k3(lr), "log_ratio"
    if d_max.ndim != 2:
        raise ValueError(f"per-token divergences must be (B, T), got shape {tuple(d_max.shape)}")
    m = check_mask(mask, d_max, "mask", allow_empty=True, like_name=name)
    return m, d_max, d_avg


def seq_max_kl(d: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` ``max_t d_t`` over alive tokens (0 for an empty sequence)."""
    return torch.where(mask, d, torch.zeros((), dtype=d.dtype, device=d.device)).amax(-1)


def seq_avg_kl(d: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` ``(1/T_b) sum_t d_t`` over the ``T_b`` alive tokens (0 for an empty sequence)."""
    n = mask.sum(-1).clamp_min(1)
    return torch.where(mask, d, torch.zeros((), dtype=d.dtype, device=d.device)).sum(-1) / n


def trust_region_keep(mask, criterion: str = "max", *, kl=None, log_ratio=None, delta_max=None,
                      delta_avg=None) -> torch.Tensor:
    """``(B,)`` bool, True for the sequences that stayed inside the trust region (T12's mask).

    Source: TRM (T12). From exact per-token ``kl`` (B, T): keep iff ``max_t kl <= delta_max``
    (``"max"``), ``mean_t kl <= delta_avg`` (``"avg"``) or both (``"both"``). From
    ``log_ratio`` (B, T) the max filter reads ``k2`` and the average ``k3``. Dead tokens
    (``mask`` False) are ignored.

    Shapes: mask, kl / log_ratio (B, T) -> (B,).
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    m, d_max, d_avg = _token_divergences(mask, kl, log_ratio)
    keep = torch.ones(m.shape[0], dtype=torch.bool, device=m.device)
    if criterion in ("max", "both"):
        if delta_max is None:
            raise ValueError(f"criterion {criterion!r} needs delta_max")
        keep &= seq_max_kl(d_max, m) <= float(check_nonneg(as_tensor(delta_max, "delta_max"),
                                                           "delta_max"))
    if criterion in ("avg", "both"):
        if delta_avg is None:
            raise ValueError(f"criterion {criterion!r} needs delta_avg")
        keep &= seq_avg_kl(d_avg, m) <= float(check_nonneg(as_tensor(delta_avg, "delta_avg"),
                                                           "delta_avg"))
    return keep


__all__ = ["k1", "k2", "k3", "CRITERIA", "seq_max_kl", "seq_avg_kl", "trust_region_keep"]
