"""The trade between pruned mass and the mismatch left after pruning (DVP; claim P4).

Source: DVP, Li et al., *Taming the Tail: Stable LLM RL via Dynamic Vocabulary Pruning*,
arXiv 2512.23087 (v2: *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*).

Notation as in :mod:`tailtheory.pruning.vocab`: trainer logits ``z``, sampler logits ``z'``, a
safe set ``S`` applied to both sides, the pruned policies ``pi~``/``pi~'`` and the trainer's
pruned mass ``m(s) = 1 - pi(S|s)``. On ``S``: ``Delta~_k = log pi~'(k) - log pi~(k)`` (sampler
minus trainer, as in :mod:`tailtheory.mismatch.logprob`).

Claim (ids of docs/claims.md):
    P4  sweeping rho from 1e-8 to 1e-1: pruned mass against the remaining mismatch
        ``E_{pi~'}|Delta~|``, ``max_S |Delta~|`` and ``KL(pi~' || pi~)``   :func:`pruning_sweep`,
        its knee :func:`pruning_knee`, on M7's real model :func:`p4_measurement`

Shapes: logits, perturbed_logits (B, T, V), masks (B, T, V) bool, resp_mask (B, T).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import check_logits, check_mask, check_same_shape
from tailtheory.core.registry import pick
from tailtheory.core.stats import map_row_blocks
from tailtheory.mismatch.real import m7_model, paired_logits, random_input_ids
from tailtheory.pruning.vocab import (_check_pruning, _pruned_lsm_rows, _pruned_mass_rows,
                                      safe_vocab_mask)

RHO_SWEEP = tuple(10.0 ** -k for k in range(8, 0, -1))
"""P4's sweep: ``rho = 1e-8 .. 1e-1``, one per decade (P4 in docs/claims.md)."""


def remaining_mismatch(logits, perturbed_logits, mask, resp_mask=None) -> dict:
    """The mismatch left after pruning trainer and sampler with the same ``S``, and its price.

    Source: DVP (P4). On ``S``: ``Delta~_k = log pi~'(k) - log pi~(k)`` (sampler minus trainer,
    as in ``tailtheory.mismatch.logprob``); per position ``E_{k~pi~'}|Delta~_k|``, ``max_{k in S}
    |Delta~_k|`` and the bias ``E_{k~pi~'}[Delta~_k] = KL(pi~' || pi~)`` (M4 on ``S``); per sequence
    ``sum_t KL`` and the P2 bias bound ``sum_t m(s_t)`` with ``m`` the trainer's pruned mass.
    A token of ``S`` whose logit is ``-inf`` on both sides adds 0 (as in ``logprob_mismatch``).
    Per-position values come from float64 blocks of rows: no ``(B, T, V)`` temporary.
    Shapes: logits, perturbed_logits (B, T, V), mask (B, T, V) bool, resp_mask (B, T) -> dict.
    """
    z, keep = _check_pruning(logits, mask)
    z_prime, _ = _check_pruning(perturbed_logits, mask, "mask", "perturbed_logits")
    check_same_shape(z, z_prime, ("logits", "perturbed_logits"))
    if z.ndim != 3:
        raise ValueError(f"logits must have shape (B, T, V), got {tuple(z.shape)}")
    alive = (torch.ones(z.shape[:2], dtype=torch.bool, device=z.device) if resp_mask is None
             else check_mask(resp_mask, z[..., 0], "resp_mask", like_name="logits[..., 0]"))
    m, abs_mean, abs_max, kl = map_row_blocks(_remaining_rows, z, z_prime, keep).unbind(-1)
    n = alive.sum()
    return {"mass_mean": float((m * alive).sum() / n), "mass_max": float(m[alive].max()),
            "seq_mass": float((m * alive).sum(-1).mean()),
            "kept_frac": float((keep.sum(-1) * alive).sum() / n / z.shape[-1]),
            "abs_delta_mean": float((abs_mean * alive).sum() / n),
            "abs_delta_max": float(abs_max[alive].max()),
            "bias_mean": float((kl * alive).sum() / n),
            "seq_kl": float((kl * alive).sum(-1).mean())}


def _remaining_rows(z, z_prime, keep) -> torch.Tensor:
    """Per row: ``m``, ``E_{pi~'}|Delta~|``, ``max_S |Delta~|``, ``KL(pi~' || pi~)``; (r, 4)."""
    lp, lp_prime = _pruned_lsm_rows(z, keep), _pruned_lsm_rows(z_prime, keep)   # (r, V)
    Delta = lp_prime - lp
    Delta = torch.where(keep & ~Delta.isnan(), Delta, torch.zeros_like(lp))  # NaN: -inf twice
    q = lp_prime.exp()                                                       # pi~', 0 off S
    live = q > 0                                                             # 0 * inf = 0
    kl = torch.where(live, q * Delta, 0.0).sum(-1)
    abs_mean = torch.where(live, q * Delta.abs(), 0.0).sum(-1)
    return torch.stack([_pruned_mass_rows(z, keep), abs_mean, Delta.abs().amax(-1), kl], -1)


def pruning_sweep(logits, perturbed_logits, rhos=RHO_SWEEP, rule: str = "min_p",
                  resp_mask=None):
    """P4's table: one row per threshold, plus ``rho = 0`` (no pruning) as the reference.

    Source: DVP (P4). ``S`` is the sampler's safe set (computed from ``perturbed_logits``, so
    every token it emits is in ``S``) and is applied to both sides.
    Shapes: logits, perturbed_logits (B, T, V) -> DataFrame with the keys of
    :func:`remaining_mismatch` and ``rho``.
    """
    import pandas as pd

    z_prime = check_logits(perturbed_logits, "perturbed_logits", dtype=None)
    rows = []
    for rho in (0.0, *rhos):
        keep = safe_vocab_mask(z_prime, rule, rho)
        rows.append({"rho": float(rho), **remaining_mismatch(logits, z_prime, keep, resp_mask)})
    return pd.DataFrame(rows)


def pruning_knee(sweep, mass_negligible: float = 1e-3) -> dict:
    """What the cheapest-enough threshold buys: the mismatch left at negligible pruned mass.

    Source: DVP (P4). Among the rows of :func:`pruning_sweep` with ``0 < rho`` and mean pruned
    mass ``<= mass_negligible``, the largest ``rho`` and the fraction of the unpruned sequence KL,
    mean and max ``|Delta|`` that is left there (1 when no threshold is that cheap).
    Shapes: DataFrame -> dict of floats.
    """
    if "rho" not in sweep or float(sweep.rho.iloc[0]) != 0.0:
        raise ValueError("sweep must be pruning_sweep's table, whose first row is rho = 0")
    ref = sweep.iloc[0]
    cheap = sweep[(sweep.rho > 0) & (sweep.mass_mean <= mass_negligible)]
    out = {"rho": float(cheap.rho.max()) if len(cheap) else 0.0,
           "mass_mean": float(cheap.mass_mean.max()) if len(cheap) else 0.0}
    for c in ("seq_kl", "abs_delta_mean", "abs_delta_max"):
        left = (cheap[c] / ref[c]).min() if len(cheap) and ref[c] > 0 else 1.0
        out[f"{c}_left"] = float(left)
    return out


P4_VOCAB = 512
"""P4's trainer is M7's model (``tailtheory.mismatch.real.m7_model``): a random tiny
Qwen2-style LM with this vocabulary, its lm_head sharpened so that it has a real
low-probability tail."""


def p4_measurement(profile: str = "quick", path: str = "bf16"):
    """P4's sweep on the real ``path`` mismatch of M7's model: ``(sweep, z, z_prime)``.

    Source: DVP (P4), TIM (M7). Random contexts of ``16 x 32`` tokens (``64 x 64`` thorough);
    ``z, z_prime`` from :func:`tailtheory.mismatch.real.paired_logits`, the table from
    :func:`pruning_sweep`. Shapes: -> (DataFrame, (B, T, V), (B, T, V)).
    """

    model = m7_model(P4_VOCAB)
    B, T = pick(profile, (16, 32), (64, 64))
    z, z_prime = paired_logits(model, random_input_ids(P4_VOCAB, B, T, seed=0), path)
    return pruning_sweep(z, z_prime), z, z_prime


__all__ = ["RHO_SWEEP", "remaining_mismatch", "pruning_sweep", "pruning_knee", "P4_VOCAB",
           "p4_measurement"]
