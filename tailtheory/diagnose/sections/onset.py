"""When did a per-step series start to rise: the onset test of the drift section
(:mod:`tailtheory.diagnose.sections.drift`; a helper module of that section, not a section), a one-sided CUSUM whose threshold is simulated
for a 5% false-alarm rate on a flat series of the run's length.

Source: NeMo-RL issue 1801 (the mismatch "continuously increases ... leading to training
crash"); the CUSUM of Page (1954); TIM (arXiv 2605.14220) for the k3 the drift section feeds it.

**The onset** (:func:`onset_test`), on ``x = log max(k3, K3_FLOOR)`` per step: a one-sided
upward CUSUM ``C_t = max(0, C_{t-1} + (x_t - mu) / sd - CUSUM_K)`` with ``mu`` and ``sd`` the
mean and sd of the reference window (the first fifth of the steps, :data:`REF_SHARE`; ``sd``
at least :data:`LOG_SD_FLOOR`). Its threshold ``h`` is the ``1 - ALPHA`` quantile of ``max_t C_t``
over :data:`N_SIM` simulated flat series of the run's length (seeded, :data:`SEED`) with AR(1)
noise of the coefficient fitted on the reference window, each standardised by its own reference
window as the run is (the statistic is invariant to location and scale, so the AR(1)
coefficient is the null's only parameter): a 5% false-alarm rate for the whole series (the
family of its steps). The coefficient used is the reference window's lag-1 autocorrelation
with Kendall's bias correction ``+ (1 + 3 phi) / m``, plus one standard error ``sqrt((1 -
phi^2) / m)``, clipped to ``[0, PHI_MAX]``: from a few steps the plain estimate is too low and
would let the false alarms exceed 5%. The onset is the first step of the CUSUM's excursion that
crosses ``h`` (the step after its last 0 before the crossing). Fewer than :data:`MIN_STEPS`
steps: too short (status ``too_short``, no test); a file without steps (every row step 0):
``lacks_step``.

Measured with this rule on simulated log k3 (1,000 series per cell, a standard error of 0.7%
at 5%; the slow test ``test_false_alarms_measured`` repeats the ``phi <= 0.3`` rows):

=============================  =====  =====  =====  =====  =====
steps                            20     40     60    100    200
=============================  =====  =====  =====  =====  =====
false alarms, flat, phi = 0     1.9%   2.2%   1.5%   2.4%   2.7%
false alarms, phi = 0.3         4.0%   4.1%   4.3%   5.5%   4.2%
false alarms, phi = 0.6         9.3%   7.3%   7.4%   6.7%   6.4%
=============================  =====  =====  =====  =====  =====

Above ``phi = 0.3`` the false alarms exceed 5%: a reference of a fifth of the steps cannot see a
slow wander. A rise from the middle step found within 5 steps of its start: a ramp of 0.5 sd
per step 91% / 97% / 99% (40 / 60 / 100 steps, ``phi = 0``; 76% / 91% / 95% at ``phi = 0.3``);
a jump of 3 sd 81% / 94% / 98% (58% / 76% / 93%).

Shapes: per step ``(S,)``; simulated series ``(paths, S)``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.signal import lfilter

from tailtheory.diagnose.sections.base import plural

MIN_STEPS = 20
"""Fewest steps the onset test needs (issue 61): below, "too short"."""
REF_SHARE = 0.2
"""The reference window of the CUSUM and the split's early window: the first fifth of the
steps (the split's late window: the last fifth)."""
ALPHA = 0.05
"""False-alarm rate of the onset test over a whole flat series."""
N_SIM = 2000
"""Simulated flat AR(1) series behind the threshold (the 95% quantile to about 0.5%)."""
SEED = 61
"""Seed of the simulation: the same run gets the same threshold."""
SIM_NUMBERS = 2_000_000
"""Simulated values held at a time (paths x steps), bounding the memory of long runs."""
CUSUM_K = 1.0
"""The CUSUM's allowance in reference sd: tuned to a rise of 2 sd of log k3 (``k = shift / 2``);
at 0.5 the onset falls several steps early more often (the test's planted ramps)."""
PHI_MAX = 0.9
"""Largest AR(1) coefficient of the null: a series wandering slower cannot be told from drift."""
K3_FLOOR = 1e-12
"""A step's mean k3 below this counts as it (log k3 of a bitwise-equal step is finite): the k3
of an rms ``|log rho|`` of 1.4e-6, a few float32 units of a log-prob, rounding, not drift."""
LOG_SD_FLOOR = 0.01
"""Smallest sd of the reference's log k3 (a reference of equal steps: a 1% change is one sd)."""


def reference_size(n: int) -> int:
    """Steps in the reference (and each split) window of ``n`` steps: the first fifth, at
    least 1 (2 for the CUSUM's sd)."""
    return max(1, math.ceil(REF_SHARE * n))


def fit_ar1(x) -> dict:
    """Mean, sd (ddof 1), lag-1 autocorrelation ``phi_fit`` and the coefficient the null uses,
    ``phi`` (bias-corrected, plus one standard error, clipped to ``[0, PHI_MAX]``) of the
    reference window ``x``. Shapes: (m,) -> scalars."""
    x = np.asarray(x, np.float64)
    m, r = len(x), x - x.mean()
    ss = float(r @ r)
    phi_fit = float(r[:-1] @ r[1:]) / ss if ss > 0 else 0.0
    phi = float(np.clip(phi_fit + (1 + 3 * phi_fit) / m, -PHI_MAX, PHI_MAX))
    phi = float(np.clip(phi + math.sqrt((1 - phi ** 2) / m), 0.0, PHI_MAX))
    return {"mu": float(x.mean()), "sd": math.sqrt(ss / (m - 1)), "phi_fit": phi_fit,
            "phi": phi}


def cusum(x, m: int, k: float = CUSUM_K, sd_floor: float = 0.0) -> np.ndarray:
    """The one-sided upward CUSUM of ``x`` standardised by its first ``m`` values:
    ``C_t = max(0, C_{t-1} + (x_t - mu) / max(sd, sd_floor) - k)``, ``C_{-1} = 0``.
    Shapes: x (..., n) -> (..., n)."""
    x = np.asarray(x, np.float64)
    ref = x[..., :m]
    sd = np.maximum(ref.std(-1, ddof=1, keepdims=True), sd_floor)
    z = (x - ref.mean(-1, keepdims=True)) / sd - k
    out, c = np.empty_like(z), np.zeros(z.shape[:-1])
    for t in range(z.shape[-1]):
        c = np.maximum(c + z[..., t], 0.0)
        out[..., t] = c
    return out


def threshold(n: int, m: int, phi: float, *, alpha: float = ALPHA, n_sim: int = N_SIM,
              seed: int = SEED, k: float = CUSUM_K) -> float:
    """The ``1 - alpha`` quantile of ``max_t C_t`` (:func:`cusum`) over ``n_sim`` stationary
    AR(1) series of length ``n`` and coefficient ``phi``, each standardised by its first ``m``
    values: the threshold of a ``alpha`` false-alarm rate over a flat series."""
    rng = np.random.default_rng(seed)
    block, maxima = max(1, SIM_NUMBERS // n), []
    for start in range(0, n_sim, block):
        e = rng.standard_normal((min(block, n_sim - start), n))
        e[:, 0] /= math.sqrt(1 - phi ** 2)                     # a stationary start
        maxima.append(cusum(lfilter([1.0], [1.0, -phi], e, axis=-1), m, k).max(-1))
    return float(np.quantile(np.concatenate(maxima), 1 - alpha, method="higher"))


def onset_test(steps, log_k3, *, alpha: float = ALPHA, n_sim: int = N_SIM,
               seed: int = SEED) -> dict:
    """The onset of a rise of ``log_k3`` over ``steps`` (the module's rule). Returns ``status``
    (``onset``, ``no_onset``, ``too_short``), ``steps``, ``reference`` (its first and last
    step), the reference's ``mu``, ``sd``, ``phi_fit`` and ``phi``, ``k``, ``alpha``, ``n_sim``,
    ``threshold``, ``cusum_max``, ``crossing_step`` and ``onset_step`` (None without an onset)
    and ``cusum`` (per step; NaN when too short). Raises ``ValueError`` when the two lengths
    differ or a value is not finite. Shapes: (S,) each."""
    steps, x = np.asarray(steps, np.int64), np.asarray(log_k3, np.float64)
    n = len(x)
    if len(steps) != n:
        raise ValueError(f"{plural(len(steps), 'step')} but {plural(n, 'value')} of log k3")
    if not np.isfinite(x).all():
        raise ValueError(f"log k3 must be finite (floor k3 at {K3_FLOOR:g} first), got "
                         f"{x[~np.isfinite(x)][0]} at step {steps[~np.isfinite(x)][0]}")
    out = {"status": "too_short", "steps": n, "reference": None, "mu": None, "sd": None,
           "phi_fit": None, "phi": None, "k": CUSUM_K, "alpha": alpha, "n_sim": n_sim,
           "threshold": None, "cusum_max": None, "crossing_step": None, "onset_step": None,
           "cusum": np.full(n, np.nan)}
    if n < MIN_STEPS:
        return out
    m = reference_size(n)
    c = cusum(x, m, sd_floor=LOG_SD_FLOOR)
    fit = fit_ar1(x[:m])
    h = threshold(n, m, fit["phi"], alpha=alpha, n_sim=n_sim, seed=seed)
    out.update(fit, status="no_onset", reference=[int(steps[0]), int(steps[m - 1])],
               sd=max(fit["sd"], LOG_SD_FLOOR), threshold=h, cusum_max=float(c.max()),
               cusum=c)
    over = np.flatnonzero(c > h)
    if len(over):
        zeros = np.flatnonzero(c[:over[0]] == 0)
        out.update(status="onset", crossing_step=int(steps[over[0]]),
                   onset_step=int(steps[zeros[-1] + 1 if len(zeros) else 0]))
    return out
