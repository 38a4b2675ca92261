"""Dynamic vocabulary pruning: a safe token set and its exact cost (DVP; P1-P3, the set of P4).

Paper card
    DVP: Li et al., *Taming the Tail: Stable LLM RL via Dynamic Vocabulary Pruning*,
    arXiv 2512.23087 (v2: *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*).

Notation. Logits ``z`` of a state ``s`` (one row ``(V,)``), ``pi = softmax(z)``, a safe set
``S(s)`` of kept tokens, the pruned policy ``pi~(a|s) = pi(a|s) 1[a in S] / pi(S|s)`` (in logits:
``-inf`` outside ``S`` before the log-softmax) and the pruned mass ``m(s) = 1 - pi(S|s)``.

Rules for ``S`` (the paper's exact rule could not be read, so the rule is a parameter; the rules
and :func:`safe_vocab_mask` live in :mod:`tailtheory.core.safeset`, shared with the engine):

- ``min_p``    keep ``pi(a) >= rho * max_b pi(b)``; valid ``rho`` in ``[0, 1]`` (the argmax is
  always kept; ``rho > 1`` would remove every token and raises). The default, ``rho = 1e-4``.
- ``top_p``    the smallest set, in order of decreasing ``pi``, with mass ``>= 1 - eta``;
  valid ``eta`` in ``[0, 1)`` (``eta >= 1`` is met by the empty set and raises).
- ``absolute`` keep ``pi(a) >= tau``; valid ``tau`` in ``[0, max_a pi(a)]`` for every row.

Claims (ids of docs/claims.md):
    P1  TV(pi~, pi) = m, KL(pi~ || pi) = -log(1 - m)     :func:`pruned_tv`, :func:`pruned_kl`
    P2  TV(P~, P) <= sum_t E_pi~[m(s_t)]; |J(pi~) - J(pi)| <= R_max sum_t E[m] <= R_max T max m;
        min-p: m(s) <= (V - |S(s)|) rho max_b pi(b|s)   :func:`min_p_mass_bound`
        (the trajectory bounds: :mod:`tailtheory.pruning.trajectory`)
    P3  truncating only the sampler shifts every log-ratio by exactly log pi(S|s)
                                                       :func:`truncation_log_ratio`
    P4  sweeping rho: pruned mass against the remaining mismatch   :mod:`tailtheory.pruning.sweep`

Shapes: logits (..., V), masks (..., V) bool, per-state quantities (...).
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import (check_logits, check_mask, check_same_shape, check_tokens,
                                    has_minus_inf)
from tailtheory.core.safeset import RHO_DEFAULT, RULES, check_threshold, safe_vocab_mask
from tailtheory.core.stats import map_row_blocks

# RULES, RHO_DEFAULT and safe_vocab_mask (the safe set S) come from tailtheory.core.safeset, which
# the sampler, the trainer and the fused LM head share; import them from there.


# --- the pruned policy's pieces ----------------------------------------------------------------

def _check_pruning(logits, mask, name: str = "mask",
                   logits_name: str = "logits") -> tuple[torch.Tensor, torch.Tensor]:
    """Logits in their own dtype (blocks go to float64 later) and a bool keep-mask of their
    shape that keeps, in every row, a token whose logit is finite."""
    z = check_logits(logits, logits_name, dtype=None)
    keep = check_mask(mask, z, name, allow_empty=True, like_name=logits_name)
    empty = ~keep.any(-1)
    if empty.any():
        raise ValueError(f"{name} keeps no token in {int(empty.sum())} row(s) (first at "
                         f"{tuple(int(i) for i in empty.nonzero()[0])}): the pruned policy is "
                         f"undefined there")
    if has_minus_inf(z):
        dead = ~(keep & (z > -math.inf)).any(-1)                       # z has -inf entries
        if dead.any():
            raise ValueError(f"{name} keeps only tokens whose {logits_name} is -inf in "
                             f"{int(dead.sum())} row(s) (first at "
                             f"{tuple(int(i) for i in dead.nonzero()[0])}): pi(S) = 0 there")
    return z, keep


def _f64(z: torch.Tensor) -> torch.Tensor:
    return z.to(torch.float64)


def _pruned_lsm_rows(z: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(_f64(z).masked_fill(~keep, -math.inf), -1)


def _pruned_mass_rows(z: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    z = _f64(z)
    return torch.exp(torch.logsumexp(z.masked_fill(keep, -math.inf), -1) - torch.logsumexp(z, -1))


def _kept_log_mass_rows(z: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    z = _f64(z)
    m = _pruned_mass_rows(z, keep)
    direct = torch.logsumexp(z.masked_fill(~keep, -math.inf), -1) - torch.logsumexp(z, -1)
    return torch.where(m < 0.5, torch.log1p(-m.clamp(max=0.5)), direct)


# --- P1: the pruned policy and its exact cost --------------------------------------------------

def pruned_log_softmax(logits, mask) -> torch.Tensor:
    """``log pi~(a|s)``: the log-softmax over the safe set, ``-inf`` outside it.

    Source: DVP (P1). ``log_softmax(where(S, z, -inf))``, in float64 blocks of rows.
    Shapes: logits (..., V), mask (..., V) bool -> (..., V).
    """
    z, keep = _check_pruning(logits, mask)
    return map_row_blocks(_pruned_lsm_rows, z, keep)


def pruned_mass(logits, mask) -> torch.Tensor:
    """The pruned mass ``m(s) = 1 - pi(S|s)``, accurate down to the smallest ``m``.

    Source: DVP (P1, P2). ``m = exp(LSE(z outside S) - LSE(z))`` (``0`` when nothing is pruned).
    Shapes: logits (..., V), mask (..., V) bool -> (...).
    """
    z, keep = _check_pruning(logits, mask)
    return map_row_blocks(_pruned_mass_rows, z, keep)


def kept_log_mass(logits, mask) -> torch.Tensor:
    """``log pi(S|s) = log(1 - m)``, accurate both when ``m`` is tiny and when it is near 1.

    Source: DVP (P1, P3). ``log1p(-m)`` for ``m < 1/2``, else ``LSE(z in S) - LSE(z)``.
    Shapes: logits (..., V), mask (..., V) bool -> (...).
    """
    z, keep = _check_pruning(logits, mask)
    return map_row_blocks(_kept_log_mass_rows, z, keep)


def pruned_tv(logits, mask) -> torch.Tensor:
    """Exact ``TV(pi~, pi) = 1/2 sum_a |pi~(a) - pi(a)|`` (P1 says it equals ``m``).

    Source: DVP (P1). Computed from both distributions, not from ``m``.
    Shapes: logits (..., V), mask (..., V) bool -> (...).
    """
    z, keep = _check_pruning(logits, mask)
    return map_row_blocks(lambda zc, kc: 0.5 * (_pruned_lsm_rows(zc, kc).exp()
                                                - torch.softmax(_f64(zc), -1)).abs().sum(-1),
                          z, keep)


def pruned_kl(logits, mask) -> torch.Tensor:
    """Exact ``KL(pi~ || pi) = sum_{a in S} pi~(a) log(pi~(a) / pi(a))`` (P1: ``-log(1 - m)``).

    Source: DVP (P1). Computed term by term from both log-softmaxes.
    Shapes: logits (..., V), mask (..., V) bool -> (...).
    """
    z, keep = _check_pruning(logits, mask)
    return map_row_blocks(_pruned_kl_rows, z, keep)


def _pruned_kl_rows(z: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    lp_tilde = _pruned_lsm_rows(z, keep)                               # (r, V)
    lp = torch.log_softmax(_f64(z), -1)
    # over pi~ > 0: S minus its -inf logits (0 log 0 = 0; equal to S for finite logits)
    terms = torch.where(lp_tilde > -math.inf, lp_tilde.exp() * (lp_tilde - lp),
                        torch.zeros_like(lp))
    return terms.sum(-1)


def min_p_mass_bound(logits, mask, rho: float) -> torch.Tensor:
    """Min-p's cap on the pruned mass: ``m(s) <= (V - |S(s)|) rho max_b pi(b|s)``.

    Source: DVP (P2). Every pruned token has ``pi(a) < rho max_b pi(b)``.
    Shapes: logits (..., V), mask (..., V) bool (a min-p mask at ``rho``) -> (...).
    """
    rho = check_threshold("min_p", rho)
    z, keep = _check_pruning(logits, mask)
    n_pruned = (~keep).sum(-1).to(torch.float64)
    top = map_row_blocks(lambda zc: torch.softmax(_f64(zc), -1).amax(-1), z)
    return n_pruned * rho * top


# --- P3: truncation on one side only -----------------------------------------------------------

def truncation_log_ratio(logits, mask, token, sampler_logits=None) -> torch.Tensor:
    """Exact ``log pi_train(k) - log pi_sampler(k)`` when only the sampler truncates to ``S``.

    Source: DVP (P3). Trainer: full-vocabulary log-softmax of ``logits``; sampler:
    :func:`pruned_log_softmax` of ``sampler_logits`` (default: the same logits). P3 says this
    is the both-sided log-ratio plus ``log pi_train(S|s)`` (:func:`truncation_bias`) for every
    ``k`` in ``S``; with equal logits, exactly ``log pi(S|s)``. A token whose sampler logit is
    ``-inf`` raises (the sampler never emits it); a ``-inf`` trainer logit gives ``-inf``.
    Shapes: logits (..., V), mask (..., V) bool, token (...) ids inside S -> (...).
    """
    z, keep = _check_pruning(logits, mask)
    z_s = z if sampler_logits is None else check_logits(sampler_logits, "sampler_logits",
                                                        dtype=None)
    check_same_shape(z, z_s, ("logits", "sampler_logits"))
    if sampler_logits is not None:
        _check_pruning(z_s, keep, logits_name="sampler_logits")
    k = check_tokens(token, z)
    if not keep.gather(-1, k[..., None]).all():
        raise ValueError("token must lie in the safe set S: a truncating sampler never emits "
                         "a pruned token")
    if not (z_s.gather(-1, k[..., None]) > -math.inf).all():
        raise ValueError("token must have a finite sampler logit: a sampler never emits a token "
                         "of probability 0")
    return map_row_blocks(_truncation_rows, z, z_s, keep, k)


def _truncation_rows(z, z_s, keep, k) -> torch.Tensor:
    lp_train = torch.log_softmax(_f64(z), -1).gather(-1, k[:, None])[:, 0]
    return lp_train - _pruned_lsm_rows(z_s, keep).gather(-1, k[:, None])[:, 0]


def truncation_bias(logits, mask) -> torch.Tensor:
    """P3's prediction of every one-sided log-ratio: the constant ``log pi(S|s) <= 0``.

    Source: DVP (P3). ``log pi(S|s) = log(1 - m(s))``.
    Shapes: logits (..., V), mask (..., V) bool -> (...).
    """
    return kept_log_mass(logits, mask)


__all__ = ["RULES", "RHO_DEFAULT", "safe_vocab_mask", "pruned_log_softmax", "pruned_mass",
           "kept_log_mass", "pruned_tv", "pruned_kl", "min_p_mass_bound",
           "truncation_log_ratio", "truncation_bias"]
