"""The field's opposite claims to LOPTI, as changes to the policy update: upweight the
low-probability tokens, or keep only a fifth of the tokens (the highest-entropy ones, or a
random draw).

Sources (claims L7-L9; ``tailtheory/lopti/methods.py`` registers them as the engine's
``upweight``, ``top_entropy`` and ``random_tokens`` methods):

- L7, *On the Direction of RLVR Updates* (arXiv 2603.22117): its published training scripts
  multiply every token's advantage by ``1 + c - c pi_old`` (``c = 0.2`` at 7B, 0.1 at 8B),
  Advantage Reweighting (L2) with a negative ``alpha = -c``: low-probability tokens weigh up to
  ``1 + c``, the opposite of LOPTI's damping. Their baseline is DAPO; here it runs on GRPO.
- L8, *Beyond the 80/20 Rule* (arXiv 2506.01939): the policy gradient on the top ``rho = 20%``
  of the batch's response tokens by the entropy of ``pi_old`` over the full vocabulary (the
  threshold ``tau_rho`` is a quantile over the whole batch, recomputed each step).
- L9, the control (arXiv 2605.07660): a random 20% of the tokens, which that study reports
  reaches 97.8% of full training's final score.

**Normalisation, fixed.** The kept tokens weigh 1 and the others 0 in the loss, whose
aggregation still counts every response token in its denominators (the engine's rule for a
token weighed 0, :func:`tailtheory.engine.methods.aggregate_loss`): under ``token-mean`` the loss
is ``sum_{kept} l_t / sum_i |o_i|``, as in arXiv 2506.01939's objective (``1 / sum_i |o_i|``
outside the indicator) and TRL's ``top_entropy_quantile``. Dividing by the kept tokens instead
would make every gradient about ``1 / 0.2 = 5`` times larger; neither method does. Under AdamW,
the engine's optimiser, that factor would barely change the step: a gradient scaled by a
constant scales both of Adam's moments alike, so the update ``m / (sqrt(v) + eps)`` is the same
but for ``eps`` (1e-8) and the norm clip (1.0, far above these models' gradient norms). What the
two 20% methods change here is which tokens carry the signal, not the step size (tested in
``tests/lopti/test_opposite.py``).

**How many and which.** Of the ``n`` response tokens of a step, ``k = ceil(fraction n)`` are kept
(at least one when ``n > 0``; ``fraction n`` rounded to 9 decimals first, so ``0.2 * 15`` keeps 3,
not 4). ``top_entropy`` keeps the ``k`` highest entropies, ties broken by position (row-major
over ``(B, T)``: the earlier token first), so exactly ``k`` whatever the ties; its threshold is
the ``k``-th highest entropy. ``random_tokens`` keeps a uniformly random ``k``-subset drawn by a
CPU generator seeded with :func:`token_mask_seed` of the run's seed and the step, so a run draws
the same mask on every machine and on resume, and another mask at every step. The ``n`` tokens
are every response token of the step, before ``filter_zero_var`` drops the groups whose rewards
tie (off on every recipe): with it on, fewer than ``k`` kept tokens may remain in the loss.

Shapes: per-token tensors ``(B, T)`` with a bool ``mask (B, T)``.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import check_finite, check_mask
from tailtheory.lopti.reweight import pi_old_reweight

TOKEN_MASK_SEED = 7_000
"""Base of :func:`token_mask_seed`: ``random_tokens``'s generator at step ``s`` of a run of seed
``r`` is seeded with ``TOKEN_MASK_SEED + 100_000 r + s`` (the trainer's problem stream uses base
1000 with the same layout, so the two never share a seed below step 6,000)."""


def check_c(c: float) -> None:
    """``upweight``'s strength is a finite number ``>= 0``; raises ``ValueError``."""
    if not (c >= 0 and math.isfinite(c)):
        raise ValueError(f"upweight_c must be a finite number >= 0, got {c}")


def check_fraction(fraction: float) -> None:
    """The kept share of tokens lies in ``(0, 1]``; raises ``ValueError``."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"token_fraction must lie in (0, 1], got {fraction}")


def upweight_advantage(adv: torch.Tensor, old_logp: torch.Tensor, c: float) -> torch.Tensor:
    """Upweight the low-probability tokens: ``A_t <- (1 + c - c pi_old(y_t)) A_t``.

    Source: arXiv 2603.22117's training scripts (``c = 0.2`` at 7B), claim L7. For both signs of
    ``A``, ``pi_old`` detached; the factor lies in ``[1, 1 + c]``; ``c = 0`` is plain GRPO. It is
    Advantage Reweighting (L2) at ``alpha = -c``.
    Shapes: adv (B, T), old_logp (B, T) -> (B, T).
    """
    check_c(c)
    return pi_old_reweight(adv, old_logp, -c)


def kept_count(n: int, fraction: float) -> int:
    """How many of ``n`` tokens a ``fraction`` keeps: ``ceil(fraction n)`` with ``fraction n``
    rounded to 9 decimals first (float products such as ``0.2 * 15 = 3.0000000000000004``), at
    least 1 when ``n > 0``."""
    check_fraction(fraction)
    return 0 if n == 0 else max(1, math.ceil(round(fraction * n, 9)))


def _scatter(mask: torch.Tensor, picked: torch.Tensor) -> torch.Tensor:
    """A ``(B, T)`` bool mask that is True at the ``picked`` indices (into ``mask``'s True
    positions, row-major) and False elsewhere."""
    where = mask.reshape(-1).nonzero()[:, 0]                            # (n,)
    out = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
    out[where[picked.to(where.device)]] = True
    return out.reshape(mask.shape)


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor,
                     fraction: float) -> tuple[torch.Tensor, float]:
    """The top ``fraction`` of the response tokens by entropy, and the threshold.

    Source: arXiv 2506.01939 (claim L8): ``I[H_t >= tau_rho]`` with ``tau_rho`` the batch's
    ``rho``-quantile, here as exactly ``k = kept_count(n, fraction)`` tokens of the ``n`` in
    ``mask``: the highest entropies, ties broken by position (row-major, the earlier first).
    The threshold is the ``k``-th highest entropy (NaN when no token is a response token).
    Shapes: entropy (B, T), mask (B, T) -> ((B, T) bool, float).
    """
    mask = check_mask(mask, entropy, allow_empty=True, like_name="entropy")
    h = check_finite(entropy.detach()[mask], "entropy")                  # (n,) row-major
    k = kept_count(h.numel(), fraction)
    if k == 0:
        return torch.zeros_like(mask), float("nan")
    order = torch.sort(-h.double(), stable=True).indices[:k]        # descending, stable ties
    return _scatter(mask, order), float(h[order[-1]])


def token_mask_seed(seed: int, step: int) -> int:
    """The seed of ``random_tokens``'s generator at ``step`` of a run of ``seed``
    (:data:`TOKEN_MASK_SEED`)."""
    if seed is None or step is None:
        raise ValueError("random_tokens needs the run's seed and the step (set by the trainer); "
                         "this batch has none")
    return TOKEN_MASK_SEED + 100_000 * int(seed) + int(step)


def random_token_mask(mask: torch.Tensor, fraction: float, seed: int, step: int) -> torch.Tensor:
    """A uniformly random ``kept_count(n, fraction)`` of the ``n`` response tokens.

    Source: the control of arXiv 2605.07660 (claim L9). ``torch.randperm(n)`` of a CPU generator
    seeded with :func:`token_mask_seed` ``(seed, step)``, its first ``k`` entries indexing the
    response tokens in row-major order: the same mask for the same run, step and batch on any
    device, another at every step.
    Shapes: mask (B, T) -> (B, T) bool.
    """
    mask = check_mask(mask, mask, allow_empty=True)
    n = int(mask.sum())
    g = torch.Generator().manual_seed(token_mask_seed(seed, step))
    return _scatter(mask, torch.randperm(n, generator=g)[:kept_count(n, fraction)])


__all__ = ["TOKEN_MASK_SEED", "check_c", "check_fraction", "upweight_advantage", "kept_count",
           "top_entropy_mask", "token_mask_seed", "random_token_mask"]
