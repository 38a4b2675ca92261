"""The onset test of the drift section (``tailtheory.diagnose.sections.onset``): its false
alarms on flat AR(1) series within 5%, its onset on planted rises near their start, the CUSUM by its
recursion and the onset rule on a hand-made series."""

import math

import numpy as np
import pytest
from scipy.signal import lfilter

from tailtheory.diagnose.sections.onset import ALPHA, MIN_STEPS, cusum, fit_ar1, onset_test


def _ar1(rng, n, phi):
    """A flat AR(1) series of unit marginal sd. Shapes: (n,)."""
    e = rng.standard_normal(n)
    e[0] /= math.sqrt(1 - phi ** 2)
    return lfilter([1.0], [1.0, -phi], e) * math.sqrt(1 - phi ** 2)


def test_false_alarms_on_flat_series_within_5_percent():
    """Over 200 flat series of 40 steps with AR(1) noise (phi = 0.3, which the reference of 8
    steps must estimate), the onset test fires in at most 5% of them, with binomial slack
    ``alpha + 3 sqrt(alpha (1 - alpha) / N)`` (the slow test covers 20-200 steps, phi 0 and
    0.3, over 1,000 series each)."""
    N, n = 200, 40
    rng = np.random.default_rng(0)
    fired = [onset_test(np.arange(n), _ar1(rng, n, 0.3) - 8)["status"] == "onset"
             for _ in range(N)]
    assert np.mean(fired) <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / N), np.mean(fired)


@pytest.mark.slow  # make test-thorough: the docstring's table, 1,000 series per cell
def test_false_alarms_measured():
    """The rows ``phi <= 0.3`` of the module's table: at most 5% (with the binomial slack of
    1,000 series) at 20 to 200 steps."""
    N = 1000
    slack = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / N)
    for n in (20, 40, 60, 100, 200):
        for phi in (0.0, 0.3):
            rng = np.random.default_rng(n)
            rate = np.mean([onset_test(np.arange(n), _ar1(rng, n, phi))["status"] == "onset"
                            for _ in range(N)])
            assert rate <= slack, (n, phi, rate)


@pytest.mark.parametrize("kind, size, n", [("ramp", 0.5, 60), ("jump", 3.0, 100)])
def test_planted_rise_found_near_its_start(kind, size, n):
    """log k3 flat, then from the middle step ``s0`` rising by ``size`` sd per step (a ramp, as
    NeMo-RL issue 1801's growing mismatch) or jumping by ``size`` sd: over 100 simulations the
    onset is within 5 steps of ``s0`` in at least 90% of them."""
    rng, s0, t = np.random.default_rng(7), n // 2, np.arange(n)
    rise = size * np.maximum(t - s0 + 1, 0) if kind == "ramp" else size * (t >= s0)
    hits = []
    for _ in range(100):
        r = onset_test(t + 100, _ar1(rng, n, 0.0) - 8 + rise)     # steps need not start at 0
        hits.append(r["status"] == "onset" and abs(r["onset_step"] - 100 - s0) <= 5)
    assert np.mean(hits) >= 0.9, np.mean(hits)


def test_onset_rule_on_a_hand_made_series():
    """The CUSUM by its recursion; the onset is the step after its last 0 before the crossing;
    AR(1)'s fit; too short below 20 steps; a constant reference uses the sd floor."""
    x = np.r_[np.zeros(24), [0.3, -0.2, 2.0, 3.0, 5.0, 8.0, 9.0, 9.0]]
    x[:24:2] += 0.1                                        # a reference of sd ~0.05
    c = cusum(x, 5, k=1.0)
    ref = x[:5]
    z = (x - ref.mean()) / ref.std(ddof=1) - 1.0
    want, acc = [], 0.0
    for v in z:
        acc = max(acc + v, 0.0)
        want.append(acc)
    np.testing.assert_allclose(c, want, rtol=1e-12)
    r = onset_test(np.arange(len(x)), x)                   # reference: the first 7 steps
    assert r["status"] == "onset" and r["reference"] == [0, 6]
    before = cusum(x, 7, sd_floor=0.01)[:r["crossing_step"]]
    assert before[24] > 0 == before[25]                    # step 24's 0.3 is undone by 25's
    assert r["onset_step"] == np.flatnonzero(before == 0)[-1] + 1 == 26
    assert r["phi_fit"] < 0 <= r["phi"]
    fit = fit_ar1([1.0, 2.0, 3.0, 4.0])
    assert fit["mu"] == 2.5 and fit["phi_fit"] == pytest.approx(0.25) and fit["phi"] > 0.25
    short = onset_test(np.arange(MIN_STEPS - 1), np.zeros(MIN_STEPS - 1))
    assert short["status"] == "too_short" and short["threshold"] is None
    flat = onset_test(np.arange(30), np.r_[np.zeros(20), 0.5 * np.ones(10)])
    assert flat["sd"] == 0.01 and flat["onset_step"] == 20      # 0.5 = 50 sd of the floor
    assert onset_test(np.arange(30), np.zeros(30))["status"] == "no_onset"
    with pytest.raises(ValueError, match="3 steps but 2 values"):
        onset_test([0, 1, 2], [0.0, 1.0])
    with pytest.raises(ValueError, match="log k3 must be finite"):
        onset_test(np.arange(3), [0.0, np.nan, 1.0])
