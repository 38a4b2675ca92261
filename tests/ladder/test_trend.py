"""Trend verdicts (``tailtheory/ladder/trend.py``): the slope and its t interval as scipy's
regression gives them, each verdict on data built to reach it, and bad input refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tailtheory.ladder.trend import TREND_VERDICTS, extrapolate, size_trend

SIZES = [1.6e6, 3.6e6, 6.8e6, 13.8e6, 21.8e6]
"""The ladder's parameter counts (five rungs)."""


@pytest.mark.parametrize("seed", range(5))
def test_slope_and_interval_are_the_regressions(seed):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=len(SIZES))
    t = size_trend(SIZES, y, delta=0.1)
    fit = stats.linregress(np.log10(SIZES), y)
    half = stats.t.ppf(0.975, len(SIZES) - 2) * fit.stderr
    assert t.slope == pytest.approx(fit.slope, abs=1e-12)
    assert (t.low, t.high) == (pytest.approx(fit.slope - half, abs=1e-12),
                               pytest.approx(fit.slope + half, abs=1e-12))
    assert extrapolate(t, 1e9) == pytest.approx(fit.intercept + fit.slope * 9, abs=1e-9)
    assert t.verdict in TREND_VERDICTS


def _values(slope, noise, seed=0):
    rng = np.random.default_rng(seed)
    return [0.5 + slope * math.log10(n) + noise * rng.normal() for n in SIZES]


@pytest.mark.parametrize("slope, noise, delta, verdict, within", [
    (0.2, 0.001, 0.05, "GROWS", False),
    (-0.2, 0.001, 0.05, "SHRINKS", False),
    (0.01, 0.0005, 0.05, "GROWS", True),         # a measured change, smaller than delta
    (0.0, 0.001, 0.05, "FLAT", False),
    (0.0, 0.1, 0.05, "UNRESOLVED", False),       # cannot tell: not FLAT
])
def test_each_verdict(slope, noise, delta, verdict, within):
    t = size_trend(SIZES, _values(slope, noise), delta)
    assert (t.verdict, t.within_delta) == (verdict, within), t


@pytest.mark.parametrize("params, values, delta, match", [
    ([1e6, 2e6], [0.1, 0.2], 0.1, "at least 3 distinct sizes"),
    ([1e6, 1e6, 2e6], [0.1, 0.2, 0.3], 0.1, "at least 3 distinct sizes"),
    ([1e6, 2e6, 0], [0.1, 0.2, 0.3], 0.1, "params must be finite and > 0"),
    ([1e6, 2e6, 4e6], [0.1, float("nan"), 0.3], 0.1, "values finite"),
    ([1e6, 2e6, 4e6], [0.1, 0.2], 0.1, "one length"),
    ([1e6, 2e6, 4e6], [0.1, 0.2, 0.3], 0.0, "delta > 0"),
])
def test_bad_input(params, values, delta, match):
    with pytest.raises(ValueError, match=match):
        size_trend(params, values, delta)
