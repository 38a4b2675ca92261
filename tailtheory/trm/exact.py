"""The exact quantities of TRM's error analysis, by enumeration of a tabular pair.

Source: TRM (T1-T9, T11, T13). Li et al., *Trust Region Masking for Long-Horizon LLM
Reinforcement Learning*, arXiv 2512.23075.

Notation. ``pi_roll`` generates the data, ``pi_theta`` is trained. ``rho_t = pi_theta(y_t|c_t) /
pi_roll(y_t|c_t)``; ``d_t`` is the distribution of the context ``c_t`` under ``pi_roll``.
Token divergences use the direction **rollout || train**:
``D_TV(c) = 1/2 sum_v |pi_theta(v|c) - pi_roll(v|c)|``,
``D_KL(c) = KL(pi_roll(.|c) || pi_theta(.|c))``.

- ``J(pi) = E_{y~pi}[R]``; surrogate ``L' = E_roll[R sum_t (rho_t - 1)]``;
  ``Error = J(theta) - J(roll) - L'``.
- ``delta = max D_KL``, ``eps = max D_TV`` over contexts reachable under ``pi_roll``;
  ``D^seq_KL = sum_t E_{d_t}[D_KL]`` (= KL of the sequence laws, chain rule);
  ``D^seq_TV = TV(P^roll, P^theta)``; ``Dbar_t = E_{d_t}[D_TV]``.
- T9: ``Error = -Delta``, ``Delta = E_roll[R sum_t (rho_t - 1)(1 - prod_{j>t} rho_j)]``.

With an EOS token the positions after it are an absorbing state where both policies agree, so
they add nothing to any divergence. Shapes: rewards (N,); per-context (P,); per-position (T,).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import as_tensor, check_unit_interval
from tailtheory.core.estimators import k3
from tailtheory.core.tabular import TabularPolicy


def _check_pair(roll: TabularPolicy, theta: TabularPolicy) -> None:
    if (roll.V, roll.T, roll.eos) != (theta.V, theta.T, theta.eos):
        raise ValueError(f"roll {roll!r} and theta {theta!r} must share V, T and eos")


def _check_rewards(R, pol: TabularPolicy) -> torch.Tensor:
    R = check_unit_interval(R, "R")
    if R.shape != (pol.seqs.shape[0],):
        raise ValueError(f"R must have shape (N,) = ({pol.seqs.shape[0]},), got {tuple(R.shape)}")
    return R


def context_kl(roll: TabularPolicy, theta: TabularPolicy) -> torch.Tensor:
    """``(P,)`` ``KL(pi_roll(.|c) || pi_theta(.|c))`` per context. Source: TRM (T12).

    ``sum_v p_roll (log p_roll - log p_theta)``, with ``0 log 0 = 0``.
    """
    _check_pair(roll, theta)
    p, lp, lq = roll.probs(), roll.log_probs(), theta.log_probs()
    term = torch.where(p > 0, p * (lp - lq), torch.zeros((), dtype=p.dtype))
    return term.sum(-1).clamp_min(0.0)


def k3_expectation(roll: TabularPolicy, theta: TabularPolicy) -> torch.Tensor:
    """``(P,)`` ``E_{v ~ pi_roll(.|c)}[k3(log rho_v)]`` per context, ``rho = pi_theta / pi_roll``.

    Source: TRM (T12). Equals :func:`context_kl` exactly: ``k3 = rho - 1 - log rho`` is an
    unbiased (and non-negative) estimate of ``KL(pi_roll || pi_theta)`` from sampled tokens.
    """
    _check_pair(roll, theta)
    return (roll.probs() * k3(theta.log_probs() - roll.log_probs())).sum(-1)


def context_tv(roll: TabularPolicy, theta: TabularPolicy) -> torch.Tensor:
    """``(P,)`` ``1/2 sum_v |pi_theta(v|c) - pi_roll(v|c)|`` per context."""
    _check_pair(roll, theta)
    return 0.5 * (theta.probs() - roll.probs()).abs().sum(-1)


def depth_average(pol: TabularPolicy, per_context: torch.Tensor) -> torch.Tensor:
    """``(T,)`` ``E_{c_t ~ d_t}[f(c_t)]`` for each position ``t`` (0 past EOS)."""
    w = pol.context_prob() * per_context                                # (P,)
    return torch.zeros(pol.T, dtype=torch.float64).index_add_(0, pol.context_depth(), w)


def divergences(roll: TabularPolicy, theta: TabularPolicy) -> dict[str, object]:
    """``delta, eps, seq_kl, seq_tv`` (floats) and ``mean_tv`` (the vector ``Dbar_t``, (T,)).

    Maxima run over contexts reachable under ``pi_roll`` (``d_t(c) > 0``).
    """
    kl, tv = context_kl(roll, theta), context_tv(roll, theta)
    reach = roll.context_prob() > 0
    seq_tv = 0.5 * (theta.seq_prob - roll.seq_prob).abs().sum()
    return {
        "delta": kl[reach].max().item(),
        "eps": min(1.0, tv[reach].max().item()),
        "seq_kl": depth_average(roll, kl).sum().item(),
        "seq_tv": min(1.0, seq_tv.item()),
        "mean_tv": depth_average(roll, tv).clamp(0.0, 1.0),
    }


def log_ratio(roll: TabularPolicy, theta: TabularPolicy) -> torch.Tensor:
    """``(N, T)`` ``log rho_t`` per sequence position (0 where dead)."""
    _check_pair(roll, theta)
    return theta.token_logp - roll.token_logp


def objective(pol: TabularPolicy, R) -> float:
    """``J(pi) = E_{y~pi}[R(y)]``, exactly."""
    return pol.expect(_check_rewards(R, pol)).item()


def surrogate(roll: TabularPolicy, theta: TabularPolicy, R) -> float:
    """``L'(pi_theta) = E_roll[R sum_t (rho_t - 1)]`` over alive positions."""
    R = _check_rewards(R, roll)
    rho_m1 = torch.expm1(log_ratio(roll, theta)) * roll.mask            # (N, T)
    return roll.expect(R * rho_m1.sum(-1)).item()


def error(roll: TabularPolicy, theta: TabularPolicy, R) -> float:
    """``Error = J(theta) - J(roll) - L'(theta)``: what the surrogate misses."""
    return objective(theta, R) - objective(roll, R) - surrogate(roll, theta, R)


def delta_t9(roll: TabularPolicy, theta: TabularPolicy, R) -> float:
    """T9's ``Delta = E_roll[R sum_t (rho_t - 1)(1 - prod_{j>t} rho_j)]`` (``Error = -Delta``).

    Source: TRM (T9). ``prod_{j>t} rho_j = exp(suffix sum of log rho)``.
    """
    R = _check_rewards(R, roll)
    lr = log_ratio(roll, theta)                                         # (N, T)
    suffix = lr.flip(-1).cumsum(-1).flip(-1) - lr                       # sum_{j>t} log rho_j
    terms = torch.expm1(lr) * (-torch.expm1(suffix)) * roll.mask        # (N, T)
    return roll.expect(R * terms.sum(-1)).item()


def worst_case_reward(roll: TabularPolicy, theta: TabularPolicy) -> torch.Tensor:
    """The reward in ``[0, 1]^N`` that maximises ``|Error|`` for this pair (exactly).

    ``Error`` is linear in ``R``: ``Error = sum_y R(y) w(y)`` with
    ``w = P^theta - P^roll - P^roll sum_t (rho_t - 1)``; the maximiser of ``|Error|`` is the
    indicator of ``w > 0`` or of ``w < 0``, whichever gives the larger total.
    """
    rho_m1 = (torch.expm1(log_ratio(roll, theta)) * roll.mask).sum(-1)  # (N,)
    w = theta.seq_prob - roll.seq_prob - roll.seq_prob * rho_m1
    pos = (w > 0).double()
    return pos if w.clamp_min(0).sum() >= (-w).clamp_min(0).sum() else 1.0 - pos


def exact_report(roll: TabularPolicy, theta: TabularPolicy, R) -> dict[str, object]:
    """Every exact quantity of the pair and reward: ``J_roll, J_theta, surrogate, error,
    delta_t9`` and the divergences of :func:`divergences`."""
    R = as_tensor(R, "R")
    out: dict[str, object] = {"J_roll": objective(roll, R), "J_theta": objective(theta, R),
                              "surrogate": surrogate(roll, theta, R)}
    out["error"] = out["J_theta"] - out["J_roll"] - out["surrogate"]
    out["delta_t9"] = delta_t9(roll, theta, R)
    out.update(divergences(roll, theta))
    return out


__all__ = ["context_kl", "k3_expectation", "context_tv", "depth_average", "divergences", "log_ratio", "objective",
           "surrogate", "error", "delta_t9", "worst_case_reward", "exact_report"]
