"""Trend verdicts: an effect against model size, by a rule fixed before measuring.

An effect measured at several sizes (the rungs of the model-size ladder,
:mod:`tailtheory.engine.start.rungs`) is fitted by least squares against ``log10`` of the
parameter count, one point per size: the sizes' means are the units, so seeds inform a point's
value, not the count of points. The slope's two-sided t interval has ``n - 2`` degrees of freedom
(``n`` sizes, at least 3), and the verdict (:data:`TREND_VERDICTS`) reads it:

- **GROWS** / **SHRINKS**: the interval lies above / below 0;
- **FLAT**: the interval lies inside ``[-delta, +delta]`` per decade of parameters (an
  equivalence test, with ``delta`` fixed per claim in advance: FLAT says the effect does not
  move by more than ``delta`` per decade, not "cannot tell");
- **UNRESOLVED**: neither.

A slope whose interval excludes 0 and also lies inside ``+-delta`` is GROWS or SHRINKS (a change
is measured) and flagged ``within_delta`` (it is smaller than the claim's bound).
:func:`extrapolate` evaluates the fitted line at another size (drawn dashed: nothing says the
trend stays linear in ``log10`` of the size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

TREND_VERDICTS = ("GROWS", "SHRINKS", "FLAT", "UNRESOLVED")
"""The verdicts of an effect against size."""

LEVEL = 0.95
"""Two-sided confidence level of the slope's interval."""


@dataclass(frozen=True)
class Trend:
    """A fitted trend: ``value = intercept + slope * log10(params)``; ``low`` .. ``high`` the
    slope's interval; ``delta`` the claim's FLAT bound per decade."""

    slope: float
    low: float
    high: float
    intercept: float
    n: int
    delta: float
    verdict: str
    within_delta: bool


def size_trend(params, values, delta: float, level: float = LEVEL) -> Trend:
    """The trend of ``values`` (one mean per size) against ``log10(params)`` and its verdict
    (module docstring). ``params``: positive parameter counts, at least 3 distinct sizes;
    ``delta``: the FLAT bound per decade, > 0. Bad input is a ``ValueError``."""
    x = np.asarray(params, dtype=float)
    y = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"params and values must be 1-D of one length, got shapes {x.shape} "
                         f"and {y.shape}")
    if len(x) < 3 or len(set(x.tolist())) < 3:
        raise ValueError(f"a trend needs at least 3 distinct sizes (n - 2 >= 1 degrees of "
                         f"freedom), got {len(set(x.tolist()))}")
    if not (np.all(np.isfinite(x)) and np.all(x > 0) and np.all(np.isfinite(y))):
        raise ValueError("params must be finite and > 0, values finite")
    if not (math.isfinite(delta) and delta > 0) or not 0 < level < 1:
        raise ValueError(f"need delta > 0 and 0 < level < 1, got delta={delta}, level={level}")
    lx = np.log10(x)
    xc = lx - lx.mean()
    sxx = float(xc @ xc)
    slope = float(xc @ (y - y.mean())) / sxx
    intercept = float(y.mean() - slope * lx.mean())
    resid = y - intercept - slope * lx
    n = len(x)
    se = math.sqrt(float(resid @ resid) / (n - 2) / sxx)
    half = float(stats.t.ppf(0.5 + level / 2, n - 2)) * se
    low, high = slope - half, slope + half
    inside = -delta <= low and high <= delta
    verdict = ("GROWS" if low > 0 else "SHRINKS" if high < 0 else
               "FLAT" if inside else "UNRESOLVED")
    return Trend(slope, low, high, intercept, n, float(delta), verdict,
                 inside and verdict in ("GROWS", "SHRINKS"))


def extrapolate(trend: Trend, params: float) -> float:
    """The fitted line at ``params`` parameters (e.g. 1e9: a dashed line, not a measurement)."""
    if not params > 0:
        raise ValueError(f"params must be > 0, got {params}")
    return trend.intercept + trend.slope * math.log10(params)
