"""Bounds on the surrogate error of long-horizon policy optimisation.

Source: TRM. Li et al., *Trust Region Masking for Long-Horizon LLM Reinforcement Learning*,
arXiv 2512.23075. Claims T1-T8 and T10 (docs/claims.md).

Notation: horizon ``T``; ``delta = max_c KL(pi_roll || pi_theta)(c)``; ``eps = max_c D_TV(c)``;
``seq_kl = D^seq_KL = sum_t E_{d_t}[D_KL]``; ``seq_tv = D^seq_TV = TV(P^roll, P^theta)``;
``mean_tv = Dbar_t = E_{d_t}[D_TV]`` for ``t = 1..T``. The exact quantities they bound live in
:mod:`tailtheory.trm.exact`; the masking criteria (T12) in :mod:`tailtheory.trm.mask`.

| id  | key        | bound on ``|Error|``                                              |
|-----|------------|-------------------------------------------------------------------|
| T1  | classical  | ``2 T (T-1) eps^2``                                               |
| T2  | pm_kl      | ``4 min(1, sqrt(delta/2)) sum_t min(1, sqrt((t-1) delta/2))``     |
| T3  | pm_tv      | ``4 min(1, eps) sum_t min(1, sqrt((t-1) delta/2))``               |
| T4  | mix_kl     | ``4 T min(1, sqrt(delta/2)) min(1, sqrt(seq_kl/2))``              |
| T5  | mix_tv     | ``4 T min(1, eps) min(1, seq_tv)``                                |
| T6  | coupling   | ``4 min(1, eps) sum_t min(1, (t-1) eps)``                         |
| T7  | adaptive   | ``4 sum_t Dbar_t min(1, (T-t) eps, sqrt((T-t) delta/2))``         |
| T8  | unified    | minimum of T2-T7                                                  |

T10 (derived): each bound still holds halved, because ``sum_v (pi_theta - pi_roll) = 0`` and the
per-step Q-values lie in [0, 1], so the advantage shift per step is at most ``D_TV``, not
``2 D_TV``. ``halved=True`` returns those.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.checks import as_tensor, check_nonneg, check_positive_int

BOUND_KEYS = ("classical", "pm_kl", "pm_tv", "mix_kl", "mix_tv", "coupling", "adaptive",
              "unified")
"""Keys of :func:`trust_region_bounds`, in the order of the claims T1-T8."""

UNIFIED_OF = ("pm_kl", "pm_tv", "mix_kl", "mix_tv", "coupling", "adaptive")
"""The bounds T8 takes the minimum of (T2-T7; the classical bound is not among them)."""

SEQ_KL_RTOL = 1e-9
"""Relative slack allowed on ``seq_kl <= T delta`` (both are sums of floats)."""


def _scalar(x, name: str) -> float:
    t = check_nonneg(as_tensor(x, name), name)
    if t.numel() != 1:
        raise ValueError(f"{name} must be a scalar, got shape {tuple(t.shape)}")
    return float(t.reshape(()))


def _eps(x) -> float:
    e = _scalar(x, "eps")
    if e > 1:
        raise ValueError(f"eps is a total variation distance and must be <= 1, got {e:.6g}")
    return e


def _prefix_tv_sum(T: int, delta: float) -> float:
    """``sum_{t=1..T} min(1, sqrt((t-1) delta / 2))``: Pinsker on the prefix KL of each step."""
    return sum(min(1.0, math.sqrt((t - 1) * delta / 2)) for t in range(1, T + 1))


def classical_bound(T: int, eps) -> float:
    """T1: ``|Error| <= 2 T (T-1) eps^2``. Source: TRM (T1)."""
    T = check_positive_int(T, "T")
    return 2.0 * T * (T - 1) * _eps(eps) ** 2


def pm_kl_bound(T: int, delta) -> float:
    """T2 (Pinsker-marginal, KL): ``4 min(1, sqrt(delta/2)) sum_t min(1, sqrt((t-1) delta/2))``,
    about ``(4/3) T^{3/2} delta`` with the caps inactive. Source: TRM (T2)."""
    T, d = check_positive_int(T, "T"), _scalar(delta, "delta")
    return 4.0 * min(1.0, math.sqrt(d / 2)) * _prefix_tv_sum(T, d)


def pm_tv_bound(T: int, delta, eps) -> float:
    """T3 (Pinsker-marginal, TV): ``4 min(1, eps) sum_t min(1, sqrt((t-1) delta/2))``.
    Source: TRM (T3)."""
    T, d = check_positive_int(T, "T"), _scalar(delta, "delta")
    return 4.0 * min(1.0, _eps(eps)) * _prefix_tv_sum(T, d)


def mix_kl_bound(T: int, delta, seq_kl) -> float:
    """T4 (Mixed, KL): ``4 T min(1, sqrt(delta/2)) min(1, sqrt(D^seq_KL/2))``, about
    ``2 T sqrt(delta D^seq_KL)``. Source: TRM (T4)."""
    T, d = check_positive_int(T, "T"), _scalar(delta, "delta")
    s = _seq_kl(seq_kl, T, d)
    return 4.0 * T * min(1.0, math.sqrt(d / 2)) * min(1.0, math.sqrt(s / 2))


def mix_tv_bound(T: int, eps, seq_tv) -> float:
    """T5 (Mixed, TV): ``4 T min(1, eps) min(1, D^seq_TV)``. Source: TRM (T5)."""
    T = check_positive_int(T, "T")
    return 4.0 * T * min(1.0, _eps(eps)) * min(1.0, _seq_tv(seq_tv))


def coupling_bound(T: int, eps) -> float:
    """T6 (Coupling): ``4 min(1, eps) sum_t min(1, (t-1) eps)``. Source: TRM (T6)."""
    T, e = check_positive_int(T, "T"), _eps(eps)
    return 4.0 * min(1.0, e) * sum(min(1.0, (t - 1) * e) for t in range(1, T + 1))


def adaptive_bound(T: int, delta, eps, mean_tv) -> float:
    """T7 (Adaptive): ``4 sum_{t=1..T} Dbar_t min(1, (T-t) eps, sqrt((T-t) delta/2))``.

    Source: TRM (T7). Shapes: mean_tv (T,).
    """
    T, d, e = check_positive_int(T, "T"), _scalar(delta, "delta"), _eps(eps)
    m = _mean_tv(mean_tv, T)
    rest = torch.arange(T - 1, -1, -1, dtype=torch.float64)              # T - t for t = 1..T
    cap = torch.minimum(torch.clamp(rest * e, max=1.0), torch.sqrt(rest * d / 2))
    return 4.0 * float((m * cap).sum())


def _seq_kl(seq_kl, T: int, delta: float) -> float:
    s = _scalar(seq_kl, "seq_kl")
    if s > T * delta * (1 + SEQ_KL_RTOL) + 1e-15:
        raise ValueError(f"seq_kl = {s:.6g} exceeds T * delta = {T * delta:.6g}: a sum of T "
                         f"per-step KLs cannot exceed T times their maximum")
    return s


def _seq_tv(seq_tv) -> float:
    s = _scalar(seq_tv, "seq_tv")
    if s > 1:
        raise ValueError(f"seq_tv is a total variation distance and must be <= 1, got {s:.6g}")
    return s


def _mean_tv(mean_tv, T: int) -> torch.Tensor:
    m = check_nonneg(as_tensor(mean_tv, "mean_tv"), "mean_tv")
    if m.shape != (T,):
        raise ValueError(f"mean_tv must have shape (T,) = ({T},), got {tuple(m.shape)}")
    if m.numel() and m.max() > 1:
        raise ValueError(f"mean_tv holds average TV distances and must be <= 1, got "
                         f"{m.max().item():.6g}")
    return m


def trust_region_bounds(T: int, delta, eps=None, seq_kl=None, seq_tv=None, mean_tv=None,
                        halved: bool = False) -> dict[str, float]:
    """All of T1-T8 that the given divergences determine. Source: TRM (T1-T8, T10).

    ``eps`` defaults to ``min(1, sqrt(delta/2))`` (Pinsker), ``seq_tv`` to
    ``min(1, sqrt(seq_kl/2))``. A bound whose input is missing is absent from the result;
    ``unified`` is the minimum of the T2-T7 bounds present. ``halved=True`` divides every bound
    by 2 (T10, derived).

    Shapes: mean_tv (T,); everything else scalar.
    """
    T, d = check_positive_int(T, "T"), _scalar(delta, "delta")
    e = min(1.0, math.sqrt(d / 2)) if eps is None else _eps(eps)
    out = {"classical": classical_bound(T, e), "pm_kl": pm_kl_bound(T, d),
           "pm_tv": pm_tv_bound(T, d, e)}
    if seq_kl is not None:
        s = _seq_kl(seq_kl, T, d)
        out["mix_kl"] = mix_kl_bound(T, d, s)
        if seq_tv is None:
            seq_tv = min(1.0, math.sqrt(s / 2))
    if seq_tv is not None:
        out["mix_tv"] = mix_tv_bound(T, e, seq_tv)
    out["coupling"] = coupling_bound(T, e)
    if mean_tv is not None:
        out["adaptive"] = adaptive_bound(T, d, e, mean_tv)
    out["unified"] = min(v for k, v in out.items() if k in UNIFIED_OF)
    scale = 0.5 if halved else 1.0
    return {k: scale * out[k] for k in BOUND_KEYS if k in out}


def unified_bound(T: int, delta, eps=None, seq_kl=None, seq_tv=None, mean_tv=None) -> float:
    """T8: the minimum of the T2-T7 bounds the inputs determine. Source: TRM (T8)."""
    return trust_region_bounds(T, delta, eps, seq_kl, seq_tv, mean_tv)["unified"]


def tightest_bound(bounds: dict[str, float]) -> str:
    """The key of the smallest of the T2-T7 bounds in ``bounds`` (the one T8 picks); ties go to
    the key listed first in ``UNIFIED_OF`` (T2 before T3: equal when ``eps = sqrt(delta/2)``)."""
    present = {k: v for k, v in bounds.items() if k in UNIFIED_OF}
    if not present:
        raise ValueError(f"bounds holds none of {UNIFIED_OF}; got keys {sorted(bounds)}")
    return min(present, key=present.get)


__all__ = ["BOUND_KEYS", "UNIFIED_OF", "trust_region_bounds", "tightest_bound",
           "classical_bound", "pm_kl_bound", "pm_tv_bound", "mix_kl_bound", "mix_tv_bound",
           "coupling_bound", "adaptive_bound", "unified_bound"]
