"""Token-level advantages: the optimal token baseline, and the group baselines it is compared with.

Paper card
    OTB: Li et al., *The Optimal Token Baseline: Variance Reduction for Long-Horizon LLM-RL*,
    arXiv 2602.07078. GRPO (group mean and std), Dr. GRPO (group mean, no std) and RLOO
    (leave-one-out mean) are the group baselines it is compared with; the GRPO engine's losses
    use them too, so they live in :mod:`tailtheory.engine.advantages`. The engine's ``otb``
    method (``tailtheory.otb.methods``) calls :func:`optimal_token_baseline`.

Notation: a batch of ``B`` responses in groups (one group per prompt, ids ``group_ids``), ``T``
positions, alive mask ``m`` (False after EOS and in padding), outcome reward ``R`` (B,) or
rewards-to-go ``G`` (B, T). Per-token energy ``w_t = 1 - 2 pi_t + sum_v pi_t(v)^2`` (the squared
norm of the logit score, S2) and realised energy ``W_t = sum_{j<=t} m_j w_j``.

Claims (ids of docs/claims.md):
    O1  w_t = ||d log pi(y_t|c_t) / dz_t||^2                   :func:`token_energy`
    O5  G^i - B* = W^-i / (W^i + W^-i) (G^i - B^-i)             :func:`otb_leave_one_out`
    O2-O4, O6 (variance of the estimators) live in :mod:`tailtheory.otb.variance`.

Every advantage function returns ``(B, T)`` with zeros at dead positions. Group of one:
GRPO with ``std=True`` and RLOO raise (no spread, no leave-one-out mean), Dr. GRPO gives 0,
OTB gives ``A = G`` (OTB's definition, O-claims of docs/claims.md).
"""

from __future__ import annotations

from typing import Any

import torch

from tailtheory.core.checks import (as_tensor, check_finite, check_logits, check_nonneg,
                                    check_same_shape)
from tailtheory.engine.advantages import alive_mask, group_index
from tailtheory.softmax.scores import sum_p_squared

OTB_EPS = 1e-8
"""Denominator guard of ``B*_t``: OTB's formula (arXiv 2602.07078), also the ``epsilon``
default of verl's ``compute_optimal_token_baseline_advantage``."""

SUM_P2_TOL = 1e-6
"""Slack on ``pi_t^2 <= sum_v pi_t(v)^2 <= 1`` when :func:`token_energy` checks its input:
float32 rounding of ``sum_p2`` (relative error ~ V * 2^-24 for a sum over V terms) stays well
below it, and any larger excess is an impossible input (``w_t`` would leave ``[0, 2]``)."""


# --- rewards-to-go -----------------------------------------------------------------------------

def broadcast_returns(returns: Any, mask: torch.Tensor, name: str = "returns") -> torch.Tensor:
    """``G (B, T)``: outcome reward ``(B,)`` copied to every position, or rewards-to-go
    ``(B, T)`` as given; zero at dead positions. NaN or inf is rejected."""
    g = check_finite(as_tensor(returns, name), name)
    if g.ndim == 1 and g.shape[0] == mask.shape[0]:
        g = g[:, None].expand(mask.shape)
    if g.shape != mask.shape:
        raise ValueError(f"{name} must have shape (B,) = ({mask.shape[0]},) or (B, T) = "
                         f"{tuple(mask.shape)} to match mask, got "
                         f"{tuple(as_tensor(returns, name).shape)}")
    return g * mask


# --- O1: the per-token energy and the realised energy ------------------------------------------

def token_energy(logits_or_sum_p2: Any, token_logp: Any, mask: Any) -> torch.Tensor:
    """Per-token energy: the squared norm of the logit score of the sampled token (O1).

    Source: OTB (O1, S2). Formula: ``w_t = 1 - 2 pi_t + sum_v pi_t(v)^2`` with
    ``pi_t = exp(token_logp)``, evaluated as ``(1 - pi_t)^2 + (sum_v pi_t(v)^2 - pi_t^2)``
    (same value, no cancellation of two numbers near 1) and clamped at 0; 0 where dead.
    ``sum_p2`` outside ``[pi_t^2, 1]`` by more than :data:`SUM_P2_TOL` at an alive position
    is impossible and raises (``w_t`` always lies in ``[0, 2]``).
    Shapes: logits (B, T, V) or sum_p2 (B, T); token_logp, mask (B, T) -> (B, T) float64.
    """
    lp = check_finite(as_tensor(token_logp, "token_logp"), "token_logp")
    if lp.ndim != 2:
        raise ValueError(f"token_logp must have shape (B, T), got {tuple(lp.shape)}")
    x = as_tensor(logits_or_sum_p2, "logits_or_sum_p2", dtype=None)
    if x.ndim == 3:  # -inf logits are masked tokens; float64 by blocks of rows
        sp2 = sum_p_squared(check_logits(x, "logits_or_sum_p2", dtype=None))  # (B, T)
    elif x.ndim == 2:
        sp2 = check_nonneg(x, "logits_or_sum_p2").to(torch.float64)
    else:
        raise ValueError(f"logits_or_sum_p2 must be logits (B, T, V) or sum_p2 (B, T), got "
                         f"{tuple(x.shape)}")
    if sp2.shape != lp.shape:
        raise ValueError(f"logits_or_sum_p2 gives {tuple(sp2.shape)} positions but token_logp "
                         f"has shape {tuple(lp.shape)}")
    m = alive_mask(mask)
    check_same_shape(m, lp, ("mask", "token_logp"))
    if (lp[m] > 0).any():
        raise ValueError("token_logp must be <= 0 at alive positions (a log-probability)")
    pi = lp.exp()
    _check_sum_p2_range(sp2[m], pi[m].double())
    w = ((1 - pi) ** 2 + (sp2 - pi**2)).clamp_min(0)
    return w * m


def _check_sum_p2_range(sp2: torch.Tensor, pi: torch.Tensor) -> None:
    """``pi^2 <= sum_p2 <= 1`` up to :data:`SUM_P2_TOL` at the alive positions given."""
    if (sp2 > 1 + SUM_P2_TOL).any():
        raise ValueError(f"logits_or_sum_p2: sum_v pi(v)^2 must be <= 1 (+{SUM_P2_TOL:g}), got "
                         f"max {float(sp2.max()):.6g} at an alive position")
    gap = sp2 - pi**2
    if (gap < -SUM_P2_TOL).any():
        raise ValueError(f"logits_or_sum_p2: sum_v pi(v)^2 must be >= pi_t^2 = exp(token_logp)^2 "
                         f"(-{SUM_P2_TOL:g}), short by up to {float(-gap.min()):.6g} at an alive "
                         f"position")


def realized_energy(logits_or_sum_p2: Any, token_logp: Any, mask: Any) -> torch.Tensor:
    """Realised energy: the running sum of per-token energies over alive positions.

    Source: OTB (section 6). Formula: ``W_t = sum_{j<=t} m_j w_j`` (see :func:`token_energy`).
    Under cross-token orthogonality of scores (exact for tabular policies) ``W_t`` equals the
    squared prefix score norm ``||sum_{j<=t} s_j||^2`` (O2).
    Shapes: logits (B, T, V) or sum_p2 (B, T); token_logp, mask (B, T) -> (B, T) float64.
    """
    return token_energy(logits_or_sum_p2, token_logp, mask).cumsum(-1)


# --- the optimal token baseline ----------------------------------------------------------------

def _otb_inputs(returns, energy, mask, group_ids):
    e = check_nonneg(as_tensor(energy, "energy"), "energy")
    m = alive_mask(mask)
    check_same_shape(e, m, ("energy", "mask"))
    G = broadcast_returns(returns, m)
    inv, counts = group_index(group_ids, m.shape[0])
    return G, e * m, m, inv, counts


def optimal_token_baseline(returns: Any, energy: Any, mask: Any, group_ids: Any,
                           eps: float = OTB_EPS) -> torch.Tensor:
    """OTB advantages: rewards-to-go minus the energy-weighted group mean at each position.

    Source: OTB (section 6). Formula: ``B*_t = sum_i G^i_t W^i_t / (sum_i W^i_t + eps)`` over
    the responses of the group alive at ``t``; ``A^i_t = (G^i_t - B*_t) m^i_t``; no std.
    A group of one gets ``A = G``. ``energy`` is ``W`` from :func:`realized_energy`.
    Shapes: returns (B,) or (B, T), energy (B, T), mask (B, T), group_ids (B,) -> (B, T).
    """
    G, W, m, inv, counts = _otb_inputs(returns, energy, mask, group_ids)
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    n_groups, T = counts.numel(), m.shape[1]
    num = torch.zeros(n_groups, T, dtype=G.dtype, device=G.device).index_add_(0, inv, G * W)
    den = torch.zeros(n_groups, T, dtype=G.dtype, device=G.device).index_add_(0, inv, W)
    den = den + eps
    B_star = torch.where(den > 0, num / torch.where(den > 0, den, 1), 0.0)[inv]  # (B, T)
    single = (counts[inv] == 1)[:, None]
    return torch.where(single, G, (G - B_star) * m)


def otb_leave_one_out(returns: Any, energy: Any, mask: Any,
                      group_ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB as a shrunk weighted RLOO: the shrink factor and the leave-one-out baseline (O5).

    Source: OTB (O5). Formula: with ``W^-i_t = sum_{j != i} W^j_t`` and
    ``B^-i_t = sum_{j != i} G^j_t W^j_t / W^-i_t`` (alive responses only),
    ``G^i - B* = W^-i / (W^i + W^-i) (G^i - B^-i)`` when ``eps = 0``. Where ``W^-i = 0`` the
    factor is 0 and ``B^-i`` is NaN (no other response carries weight).
    Shapes: as :func:`optimal_token_baseline` -> shrink (B, T), B_loo (B, T).
    """
    G, W, m, inv, counts = _otb_inputs(returns, energy, mask, group_ids)
    n_groups, T = counts.numel(), m.shape[1]
    num = torch.zeros(n_groups, T, dtype=G.dtype, device=G.device).index_add_(0, inv, G * W)[inv] - G * W
    W_rest = torch.zeros(n_groups, T, dtype=G.dtype, device=G.device).index_add_(0, inv, W)[inv] - W
    shrink = torch.where(W_rest > 0, W_rest / (W + W_rest), torch.zeros_like(W))
    B_loo = torch.where(W_rest > 0, num / W_rest, torch.full_like(W, float("nan")))
    return shrink * m, B_loo


def self_inclusion_residual(returns: Any, energy: Any, mask: Any,
                            group_ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """O5's two sides subtracted: ``(G^i - B*) - W^-i / (W^i + W^-i) (G^i - B^-i)`` at ``eps = 0``.

    Source: OTB (O5). Returns the residual and where it is defined (alive, and some other
    response of the group carries weight); the residual is 0 elsewhere.
    Shapes: as :func:`optimal_token_baseline` -> residual (B, T), defined (B, T) bool.
    """
    lhs = optimal_token_baseline(returns, energy, mask, group_ids, eps=0.0)
    shrink, B_loo = otb_leave_one_out(returns, energy, mask, group_ids)
    m = alive_mask(mask, lhs.shape[0])
    defined = torch.isfinite(B_loo) & m
    G = broadcast_returns(returns, m)
    rhs = shrink * (G - torch.nan_to_num(B_loo))
    return torch.where(defined, lhs - rhs, torch.zeros_like(lhs)), defined
