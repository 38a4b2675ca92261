"""DVP's safe set ``S(s)``: the kept vocabulary of a state, and the sampler's set on both sides.

Source: DVP (Li et al., *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*, arXiv
2512.23087; P1-P4). The rule that builds ``S`` is shared by the rollout's sampler
(``tailtheory.engine.rollout.engine``), the trainer's ``dvp`` method, the fused LM head
(``tailtheory.core.fused``) and the pruning section's exact costs (``tailtheory.pruning.vocab``),
so it lives here, below all of them.

Rules for ``S`` (the paper's exact rule could not be read, so the rule is a parameter), with
``pi = softmax(z)`` of one row of logits ``z``:

- ``min_p``    keep ``pi(a) >= rho * max_b pi(b)``; ``rho`` in ``[0, 1]`` (the argmax is always
  kept). The default, ``rho = 1e-4``.
- ``top_p``    the smallest set, in order of decreasing ``pi`` (ties by token id), with mass
  ``>= 1 - eta``; ``eta`` in ``[0, 1)``.
- ``absolute`` keep ``pi(a) >= tau``; ``tau`` in ``[0, max_a pi(a)]`` for every row.

A threshold outside its range would empty ``S`` and raises. Pruning must use the same ``S`` on
both sides (P3): :func:`dvp_keep` is the sampler's set, handed unchanged to the trainer.

Shapes: logits (..., V), masks (..., V) bool; the sampler's logits (B, T, V), tokens (B, T).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from tailtheory.core.checks import check_finite, check_logits, check_tokens
from tailtheory.core.stats import map_row_blocks

RULES = ("min_p", "top_p", "absolute")
"""The pruning rules :func:`safe_vocab_mask` knows."""

RHO_DEFAULT = 1e-4
"""Default min-p ratio: inside DVP's ``1e-4 .. 1e-8`` range (arXiv 2512.23087)."""

THRESHOLD_RANGES = {"min_p": (0.0, 1.0, True), "top_p": (0.0, 1.0, False),
                    "absolute": (0.0, 1.0, True)}
"""``(low, high, high included)`` of each rule's threshold: outside, ``S`` would be empty in
every state."""


def _min_p(logp: torch.Tensor, rho: float) -> torch.Tensor:
    if rho == 0:
        return torch.ones_like(logp, dtype=torch.bool)
    # log pi(a) - log max pi >= log rho, in log space so no probability underflows
    return logp - logp.amax(-1, keepdim=True) >= math.log(rho)


def _top_p(logp: torch.Tensor, eta: float) -> torch.Tensor:
    if eta == 0:  # every token has pi > 0, so only the whole vocabulary has mass 1
        return torch.ones_like(logp, dtype=torch.bool)
    order = torch.sort(logp, dim=-1, descending=True, stable=True).indices          # (..., V)
    sorted_lp = logp.gather(-1, order)
    # mass of a token and every token after it in the order; keep while it exceeds eta.
    # Summed from the small end in log space, so tail masses near eta are accurate.
    tail = torch.logcumsumexp(sorted_lp.flip(-1), -1).flip(-1)                  # (..., V)
    keep_sorted = tail > math.log(eta)
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def _absolute(logp: torch.Tensor, tau: float) -> torch.Tensor:
    if tau == 0:
        return torch.ones_like(logp, dtype=torch.bool)
    return logp.exp() >= tau


def _check_absolute(z: torch.Tensor, tau: float) -> None:
    """Every row must have ``max_a pi(a) >= tau``, or the absolute rule would empty ``S``."""
    top = map_row_blocks(lambda zc: torch.log_softmax(zc.to(torch.float64), -1).exp().amax(-1), z)
    if (top < tau).any():
        raise ValueError(f"threshold tau={tau:g} exceeds max_a pi(a) = {float(top.min()):.4g} in "
                         f"{int((top < tau).sum())} row(s): the absolute rule would remove every "
                         f"token there")


_RULE_FNS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "min_p": _min_p, "top_p": _top_p, "absolute": _absolute}


def _in_range(rule: str, x: float) -> bool:
    lo, hi, closed = THRESHOLD_RANGES[rule]
    return lo <= x <= hi if closed else lo <= x < hi


def _range_text(rule: str) -> str:
    lo, hi, closed = THRESHOLD_RANGES[rule]
    return f"[{lo:g}, {hi:g}{']' if closed else ')'}"


def check_threshold(rule: str, threshold: Any) -> float:
    """``threshold`` as a float after checking ``rule`` is one of :data:`RULES` and the
    threshold lies in the rule's range (:data:`THRESHOLD_RANGES`); raises ``ValueError``."""
    if rule not in _RULE_FNS:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    try:
        x = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a number, got {threshold!r}") from None
    if not _in_range(rule, x):
        raise ValueError(f"threshold for rule {rule!r} must lie in {_range_text(rule)}, got "
                         f"{threshold!r}: outside it the safe set would be empty")
    return x


def check_rule(rule: Any, threshold: Any) -> float:
    """An optional rule (``None``: no pruning, threshold 0) and its threshold, which must be a
    Python number (not a tensor) in the rule's range; raises ``ValueError``."""
    if rule is None:
        return 0.0
    if rule not in RULES:
        raise ValueError(f"rule must be None or one of {RULES}, got {rule!r}")
    x = float(threshold) if isinstance(threshold, (int, float)) else math.nan
    if not _in_range(rule, x):
        raise ValueError(f"threshold for rule {rule!r} must be a number in {_range_text(rule)}, "
                         f"got {threshold!r}")
    return x


def keep_from_logp(logp: torch.Tensor, rule: str, threshold: float) -> torch.Tensor:
    """:func:`safe_vocab_mask`'s rule applied to log-probabilities already computed (float64
    ``log_softmax`` of the logits, as it computes them): for callers that hold ``logp`` and sweep
    thresholds. Shapes: logp (..., V) -> mask (..., V) bool."""
    return _RULE_FNS[rule](logp, check_threshold(rule, threshold))


def safe_vocab_mask(logits, rule: str = "min_p", threshold: float = RHO_DEFAULT) -> torch.Tensor:
    """The safe set ``S(s)`` of each state as a keep-mask; never empty.

    Source: DVP (P1-P4). ``min_p``: ``pi(a) >= rho max_b pi(b)``, ``rho`` in [0, 1];
    ``top_p``: smallest set (ties broken by token id) with mass ``>= 1 - eta``, ``eta`` in [0, 1);
    ``absolute``: ``pi(a) >= tau``, ``tau <= max_a pi(a)`` in every row (``pi`` as
    ``exp(log_softmax(z))``). A threshold that would
    empty ``S`` raises ``ValueError``. A vocabulary of one keeps its only token (``pi = 1``).
    A ``-inf`` logit (``pi = 0``) is pruned by every threshold above 0. Computed in float64
    blocks of rows (``tailtheory.core.stats.map_row_blocks``).

    Shapes: logits (..., V) -> mask (..., V) bool.
    """
    x = check_threshold(rule, threshold)
    z = check_logits(logits, dtype=None)
    if z.shape[-1] == 1:  # the only token has pi = 1: every valid threshold keeps it
        return torch.ones(z.shape, dtype=torch.bool, device=z.device)
    if rule == "absolute" and x > 0:
        _check_absolute(z, x)
    fn = _RULE_FNS[rule]
    return map_row_blocks(lambda zc: fn(torch.log_softmax(zc.to(torch.float64), -1), x), z)


def dvp_keep(roll_logits: torch.Tensor, tokens: torch.Tensor, rule: str, rho: float,
             temperature: float = 1.0) -> torch.Tensor:
    """The sampler's kept vocabulary ``S``, to be used unchanged by the trainer.

    Source: DVP (P3). ``S = safe_vocab_mask(roll_logits / tau, rule, rho)``; the sampled token
    is always kept (a sampler that pruned on its own logits can only have sampled inside ``S``).
    Using the same ``S`` on both sides matters: pruning one side only shifts every log-ratio by
    ``log pi(S|s)`` (``tailtheory.pruning.vocab.truncation_log_ratio``).
    Shapes: roll_logits (B, T, V), tokens (B, T) -> (B, T, V) bool.
    """
    check_finite(roll_logits, "roll_logits")
    tokens = check_tokens(tokens, roll_logits, "tokens")
    keep = safe_vocab_mask(roll_logits.detach().double() / temperature, rule, rho)
    return keep.scatter(-1, tokens.long().unsqueeze(-1), True)


__all__ = ["RULES", "RHO_DEFAULT", "THRESHOLD_RANGES", "check_threshold", "check_rule",
           "safe_vocab_mask", "dvp_keep"]
