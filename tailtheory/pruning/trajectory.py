"""The pruned policy over whole trajectories, by exact enumeration (DVP; claim P2).

Source: DVP, Li et al., *Taming the Tail: Stable LLM RL via Dynamic Vocabulary Pruning*,
arXiv 2512.23087 (v2: *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*).

Notation as in :mod:`tailtheory.pruning.vocab`: ``pi~`` the policy pruned to the safe set ``S``
of each context, ``m(s) = 1 - pi(S|s)`` its pruned mass, ``P~``/``P`` the sequence distributions
of ``pi~``/``pi`` and ``J(pi) = E_{y~pi}[R(y)]`` with ``|R| <= R_max`` over horizon ``T``.

Claim (ids of docs/claims.md):
    P2  TV(P~, P) <= sum_t E_pi~[m(s_t)]; |J(pi~) - J(pi)| <= R_max sum_t E[m] <= R_max T max m;
        min-p: m(s) <= (V - |S(s)|) rho max_b pi(b|s)   :func:`trajectory_bias_bound`
        (both sides exact over every sequence of the tree: :func:`trajectory_tv`,
        :func:`return_gap`)

Shapes: a TabularPolicy over a tree with ``P`` contexts, logits (P, V), masks (P, V) bool,
rewards (N,) aligned with its ``N`` sequences.
"""

from __future__ import annotations

import math

from tailtheory.pruning.vocab import _check_pruning, _f64, min_p_mass_bound, pruned_mass


def prune_policy(pol, mask):
    """The pruned tabular policy: the same tree, logits ``-inf`` outside ``S`` of each context.

    Source: DVP (P2). Shapes: pol.logits (P, V), mask (P, V) bool -> TabularPolicy.
    """
    z, keep = _check_pruning(pol.logits, mask)
    return pol.with_logits(_f64(z).masked_fill(~keep, -math.inf))


def _check_same_tree(pol_a, pol_b) -> None:
    if (pol_a.V, pol_a.T, pol_a.eos) != (pol_b.V, pol_b.T, pol_b.eos):
        raise ValueError(f"policies must share one tree; got (V, T, eos) = "
                         f"{(pol_a.V, pol_a.T, pol_a.eos)} and {(pol_b.V, pol_b.T, pol_b.eos)}")


def trajectory_tv(pol_a, pol_b) -> float:
    """Exact ``TV(P_a, P_b) = 1/2 sum_y |P_a(y) - P_b(y)|`` over every sequence of the tree.

    Source: DVP (P2). Shapes: two TabularPolicy over the same tree -> float.
    """
    _check_same_tree(pol_a, pol_b)
    return 0.5 * float((pol_a.seq_prob - pol_b.seq_prob).abs().sum())


def return_gap(pol_a, pol_b, rewards) -> float:
    """Exact ``|J(pi_a) - J(pi_b)|`` with ``J(pi) = E_{y~pi}[R(y)]``.

    Source: DVP (P2). Shapes: rewards (N,) aligned with ``pol_a.seqs`` -> float.
    """
    _check_same_tree(pol_a, pol_b)
    return abs(float(pol_a.expect(rewards) - pol_b.expect(rewards)))


def trajectory_bias_bound(pol, mask, r_max: float = 1.0, rho: float | None = None) -> dict:
    """P2's three bounds on ``|J(pi~) - J(pi)|`` (with ``r_max = 1`` also on ``TV(P~, P)``).

    Source: DVP (P2). ``expected = R_max sum_t E_{pi~}[m(s_t)]``
    ``<= uniform = R_max T max_s m(s)`` ``<= min_p = R_max T max_s (V - |S(s)|) rho max_b pi(b|s)``
    (the last only for a min-p mask at ``rho``).
    Shapes: pol.logits (P, V), mask (P, V) bool -> dict of floats.
    """
    if not (isinstance(r_max, (int, float)) and 0 <= r_max < math.inf):
        raise ValueError(f"r_max must be a finite number >= 0, got {r_max!r}")
    m = pruned_mass(pol.logits, mask)                                        # (P,)
    reach = prune_policy(pol, mask).context_prob()                           # (P,) under pi~
    out = {"expected": r_max * float((reach * m).sum()),
           "uniform": r_max * pol.T * float(m.max())}
    if rho is not None:
        out["min_p"] = r_max * pol.T * float(min_p_mass_bound(pol.logits, mask, rho).max())
    return out


__all__ = ["prune_policy", "trajectory_tv", "return_gap", "trajectory_bias_bound"]
