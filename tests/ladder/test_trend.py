"""Trend verdicts (``tailtheory/ladder/trend.py``).

The rule with builds as units: its slope, intercept and ``se_fit`` are scipy's regression on the
build points, ``se_within`` a hand computation, ``se`` the larger, the lack-of-fit F a one-way
ANOVA's decomposition; Holm a worked example, its definition written as a loop and its
properties; Welch's t scipy's; the interval covers the true slope at the nominal rate where probe
seeds taken as units do not. The rule before (``size_trend``, superseded, kept to re-read stored
verdicts): the slope and its t interval as scipy's regression gives them, each verdict on data
built to reach it, and bad input refused.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from scipy import stats
from strategies import ladders, p_value_lists

from tailtheory.ladder.trend import (TREND_VERDICTS, WELCH_VERDICTS, build_trend, extrapolate,
                                     family_verdicts, holm, size_trend, welch_compare)

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


VERDICT_CASES = [
    (0.2, 0.001, 0.05, "GROWS", False),
    (-0.2, 0.001, 0.05, "SHRINKS", False),
    (0.01, 0.0005, 0.05, "GROWS", True),         # a measured change, smaller than delta
    (0.0, 0.001, 0.05, "FLAT", False),
    (0.0, 0.1, 0.05, "UNRESOLVED", False),       # cannot tell: not FLAT
]
"""``(slope, noise, delta, verdict, within_delta)``: a ladder built to reach each verdict."""


@pytest.mark.parametrize("slope, noise, delta, verdict, within", VERDICT_CASES)
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


# --- the rule with builds as units ----------------------------------------------------------

ATOL = 1e-12
"""Float64 agreement of two computations of one least-squares quantity (a few roundings apart)."""


@pytest.mark.parametrize("seed", range(4))
def test_build_trend_is_the_regression_on_build_points(seed):
    """Slope, intercept and se_fit are ``linregress`` on one point a build (the mean of its probe
    seeds), with ``J - 2`` degrees of freedom; interval and p from ``t(J - 2)`` on ``se``."""
    rng = np.random.default_rng(seed)
    params = [n for n in SIZES for _ in range(rng.integers(1, 4))]
    values = [rng.normal(size=rng.integers(1, 5)) for _ in params]
    t = build_trend(params, values, delta=0.1)
    points = [float(np.mean(v)) for v in values]
    fit = stats.linregress(np.log10(params), points)
    assert (t.slope, t.intercept, t.se_fit) == (pytest.approx(fit.slope, abs=ATOL),
                                                pytest.approx(fit.intercept, abs=ATOL),
                                                pytest.approx(fit.stderr, abs=ATOL))
    assert (t.n_builds, t.n_sizes, t.df) == (len(params), len(SIZES), len(params) - 2)
    assert [y for _, y in t.points] == pytest.approx(points, abs=ATOL)
    half = stats.t.ppf(0.975, t.df) * t.se
    assert (t.low, t.high) == (pytest.approx(t.slope - half), pytest.approx(t.slope + half))
    assert t.p == pytest.approx(2 * stats.t.sf(abs(t.slope) / t.se, t.df))
    assert extrapolate(t, 1e9) == pytest.approx(fit.intercept + fit.slope * 9, abs=1e-9)


def test_se_within_by_hand():
    """Builds at x = 6, 7, 8 with seeds [1, 3], [2, 4, 6], [5]: squared deviations 2 + 8 + 0 on
    1 + 2 + 0 degrees of freedom, s2_within = 10/3; S = 3 / (1/2 + 1/3 + 1) = 18/11; Sxx = 2:
    se_within = sqrt((10/3) / (18/11 * 2)) = sqrt(110/108). The points 2, 4, 5 leave residuals
    -1/6, 1/3, -1/6 (RSS = 1/6): se_fit = sqrt(1/12), smaller, so se is se_within."""
    t = build_trend([1e6, 1e7, 1e8], [[1, 3], [2, 4, 6], [5]], delta=0.1)
    assert (t.slope, t.rss) == (pytest.approx(1.5, abs=ATOL), pytest.approx(1 / 6, abs=ATOL))
    assert (t.s2_within, t.seeds) == (pytest.approx(10 / 3), pytest.approx(18 / 11))
    assert t.se_within == pytest.approx(math.sqrt(110 / 108), abs=ATOL)
    assert t.se_fit == pytest.approx(math.sqrt(1 / 12), abs=ATOL)
    assert (t.se, t.se_source) == (t.se_within, "within")
    half = stats.t.ppf(0.975, 1) * math.sqrt(110 / 108)
    assert (t.low, t.high) == (pytest.approx(1.5 - half), pytest.approx(1.5 + half))
    quiet = build_trend([1e6, 1e7, 1e8], [[1.9, 2.1], [4.0], [4.95, 5.05]], delta=0.1)
    assert (quiet.se, quiet.se_source) == (quiet.se_fit, "fit") and quiet.se_within < quiet.se_fit
    single = build_trend([1e6, 1e7, 1e8], [[2], [4], [5]], delta=0.1)
    assert (single.se_within, single.s2_within, single.se, single.se_source) == (
        None, None, single.se_fit, "fit")


def test_lack_of_fit_is_the_anova_decomposition():
    """Pure error: the points' within-size sum of squares, ``SS_total - SS_between`` of a one-way
    ANOVA over sizes (scipy's ``f_oneway`` F pins ``SS_between``); lack of fit: ``SS_between``
    less the line's ``slope^2 Sxx``; ``RSS = SSPE + SSLF``; F on ``(m - 2, J - m)`` df."""
    params = [1e6] * 3 + [1e7] * 2 + [1e8] * 2 + [1e9]
    y = np.array([0.10, 0.14, 0.12, 0.31, 0.27, 0.35, 0.41, 0.90])  # bent upward at the top
    t = build_trend(params, [[v] for v in y], delta=0.1)
    x = np.log10(params)
    groups = [y[x == s] for s in np.unique(x)]
    J, m = len(y), len(groups)
    ss_total = float(((y - y.mean()) ** 2).sum())
    ss_pure = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    ss_between = sum(len(g) * (g.mean() - y.mean()) ** 2 for g in groups)
    f_oneway = stats.f_oneway(*groups).statistic
    assert f_oneway == pytest.approx((ss_between / (m - 1)) / (ss_pure / (J - m)))
    assert ss_between == pytest.approx(ss_total - ss_pure)
    ss_lack = ss_between - t.slope ** 2 * float(((x - x.mean()) ** 2).sum())
    f = (ss_lack / (m - 2)) / (ss_pure / (J - m))
    lof = t.lack_of_fit
    assert (lof.df1, lof.df2, t.lack_of_fit_note) == (m - 2, J - m, "")
    assert (lof.ss_pure, lof.ss_lack, lof.f) == (pytest.approx(ss_pure), pytest.approx(ss_lack),
                                                 pytest.approx(f))
    assert lof.p == pytest.approx(stats.f.sf(f, m - 2, J - m))
    assert t.rss == pytest.approx(lof.ss_pure + lof.ss_lack, abs=ATOL)
    assert lof.p < 0.05  # the bend is seen; a line through the sizes' means is not
    once = build_trend([1e6, 1e7, 1e8], [[0.1], [0.3], [0.35]], delta=0.1)
    assert once.lack_of_fit is None and "two builds at some size" in once.lack_of_fit_note


@given(ladders())
def test_build_trend_properties(ladder):
    """On any ladder: ``se`` is the larger of the two and ``se_source`` names it; the interval
    holds the slope; ``RSS = SSPE + SSLF`` with ``df1 + df2 = J - 2``; a trend alone is its own
    family of one."""
    params, seed_values = ladder
    t = build_trend(params, seed_values, delta=0.1)
    assert t.se == max(t.se_fit, t.se_within if t.se_within is not None else 0.0)
    assert t.se_source == ("within" if t.se_within is not None and t.se_within > t.se_fit
                           else "fit")
    assert t.low <= t.slope <= t.high and t.verdict in TREND_VERDICTS
    assert (t.lack_of_fit is None) == (t.lack_of_fit_note != "")
    if t.lack_of_fit is not None:
        assert t.lack_of_fit.ss_pure + t.lack_of_fit.ss_lack == pytest.approx(
            t.rss, rel=1e-9, abs=1e-12)
        assert t.lack_of_fit.df1 + t.lack_of_fit.df2 == t.df
    alone = family_verdicts({"alone": t})["alone"]
    assert (alone.verdict, alone.within_delta, alone.p_adjusted) == (t.verdict, t.within_delta,
                                                                     t.p)


@pytest.mark.parametrize("slope, noise, delta, verdict, within", VERDICT_CASES)
def test_one_build_of_one_seed_a_size_is_the_rule_before(slope, noise, delta, verdict, within):
    """With one build of one seed a size the two rules fit the same line and interval, and a
    family of one at 5% rejects exactly when the 95% interval excludes 0: the same verdicts."""
    y = _values(slope, noise)
    new, old = build_trend(SIZES, [[v] for v in y], delta), size_trend(SIZES, y, delta)
    assert (new.slope, new.low, new.high) == (pytest.approx(old.slope, abs=ATOL),
                                              pytest.approx(old.low, abs=ATOL),
                                              pytest.approx(old.high, abs=ATOL))
    assert (new.verdict, new.within_delta) == (old.verdict, old.within_delta) == (verdict, within)


def test_log_trends_the_log10_of_every_value():
    """``log=True``: each probe-seed value becomes its log10 before the build's mean; a value
    of zero or below is refused, naming its build."""
    values = [[0.1, 0.2], [0.3], [0.5, 0.6, 0.7]]
    t = build_trend([1e6, 1e7, 1e8], values, delta=0.1, log=True)
    ref = build_trend([1e6, 1e7, 1e8], [np.log10(v) for v in values], delta=0.1)
    assert t.log and (t.slope, t.se, t.p) == (ref.slope, ref.se, ref.p)
    assert t.points[0][1] == pytest.approx(np.mean(np.log10([0.1, 0.2])), abs=ATOL)
    with pytest.raises(ValueError, match=r"build 1 \(1e\+07 params\): a value of zero or below "
                                         r"cannot be trended in log10"):
        build_trend([1e6, 1e7, 1e8], [[0.1], [0.0, 0.2], [0.3]], delta=0.1, log=True)
    with pytest.raises(ValueError, match="w448/b2: a value of zero or below"):
        build_trend([1e6, 1e7, 1e8], [[0.1], [0.2], [-0.3]], delta=0.1, log=True,
                    names=["base/b0", "w256/b1", "w448/b2"])


def test_the_interval_covers_the_true_slope_where_seeds_as_units_do_not():
    """400 ladders (5 sizes, 2 builds a size, 3 probe seeds a build), build noise (sd 0.1) far
    above probe noise (sd 0.02): the rule's 95% interval covers the true slope at about 95%
    (binomial sd 1.1 points). The rule before, fed probe seeds as its points (as the seeds'
    spread was once read as a size's noise), claims ``3J - 2`` degrees of freedom and the seeds'
    small spread and covers far less. Its line over one mean a size is not what fails: that is
    an exact t interval (about 95% here too), it only cannot tell build noise from a bend."""
    rng = np.random.default_rng(0)
    slope, params = 0.05, np.repeat(SIZES, 2)
    hits = {"builds": 0, "seeds as units": 0, "one mean a size": 0}
    for _ in range(400):
        build = slope * np.log10(params) + 0.1 * rng.normal(size=len(params))  # (J,)
        v = build[:, None] + 0.02 * rng.normal(size=(len(params), 3))  # (J, S)
        for rule, t in (("builds", build_trend(params, v, delta=0.1)),
                        ("seeds as units", size_trend(np.repeat(params, 3), v.ravel(), 0.1)),
                        ("one mean a size", size_trend(SIZES, v.reshape(5, 6).mean(1), 0.1))):
            hits[rule] += t.low <= slope <= t.high
    cover = {rule: h / 400 for rule, h in hits.items()}
    assert 0.92 <= cover["builds"] <= 0.98, cover
    assert cover["seeds as units"] < 0.8, cover
    assert 0.92 <= cover["one mean a size"] <= 0.98, cover


@pytest.mark.parametrize("params, seed_values, kw, match", [
    ([1e6, 2e6], [[0.1], [0.2]], {}, "at least 3 builds at 3 distinct sizes"),
    ([1e6, 1e6, 2e6, 2e6], [[0.1]] * 4, {}, "3 distinct sizes"),
    ([1e6, 2e6, 0.0], [[0.1]] * 3, {}, "params must be one finite number > 0"),
    ([1e6, 2e6, float("nan")], [[0.1]] * 3, {}, "params must be one finite number > 0"),
    ([1e6, 2e6, 4e6], [[0.1], [float("nan")], [0.3]], {}, "build 1 .*finite numbers"),
    ([1e6, 2e6, 4e6], [[0.1], [], [0.3]], {}, "build 1 .*non-empty"),
    ([1e6, 2e6, 4e6], [[0.1], [0.2]], {}, "one entry a build"),
    ([1e6, 2e6, 4e6], [[0.1]] * 3, {"names": ["a", "b"]}, "names must have one entry a build"),
    ([1e6, 2e6, 4e6], [[0.1]] * 3, {"delta": 0.0}, "delta > 0"),
    ([1e6, 2e6, 4e6], [[0.1]] * 3, {"delta": float("nan")}, "delta > 0"),
    ([1e6, 2e6, 4e6], [[0.1]] * 3, {"level": 1.0}, "level < 1"),
])
def test_build_trend_bad_input(params, seed_values, kw, match):
    with pytest.raises(ValueError, match=match):
        build_trend(params, seed_values, **{"delta": 0.1, **kw})


# --- a family of trends: Holm ---------------------------------------------------------------

def _holm_by_definition(p, alpha):
    """Holm as written: sort ascending; ``p_adj(k) = max_{i <= k} min(1, (m - i + 1) p_(i))``
    (1-based ``i``), back in input order; rejected when ``p_adj <= alpha``."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adj = [0.0] * m
    for k in range(m):
        adj[order[k]] = max(min(1.0, (m - i) * p[order[i]]) for i in range(k + 1))
    return tuple(adj), tuple(a <= alpha for a in adj)


@pytest.mark.parametrize("p, adjusted, rejected", [
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005, 3 x 0.01, 2 x 0.03, max(0.06, 1 x 0.04)
    ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02], [True, False, False, True]),
    # Bonferroni (3 p) rejects 0.015 and 0.001 only; Holm's step down also rejects 0.02
    ([0.02, 0.015, 0.001], [0.03, 0.03, 0.003], [True, True, True]),
    ([0.5], [0.5], [False]),
    ([0.2, 0.9], [0.4, 0.9], [False, False]),
])
def test_holm_by_hand(p, adjusted, rejected):
    adj, rej = holm(p, alpha=0.05)
    assert list(adj) == pytest.approx(adjusted, abs=1e-15) and list(rej) == rejected


@given(p_value_lists())
def test_holm_properties(p):
    """Holm equals its definition written as a loop; adjusted >= raw and <= 1; ordered as the
    raw p-values are; it rejects every hypothesis Bonferroni rejects."""
    adj, rej = holm(p, alpha=0.05)
    assert (adj, rej) == _holm_by_definition(p, 0.05)
    assert all(r <= a <= 1 for r, a in zip(p, adj))
    assert all(adj[i] <= adj[j] for i in range(len(p)) for j in range(len(p)) if p[i] <= p[j])
    bonferroni = [min(1.0, len(p) * r) <= 0.05 for r in p]
    assert all(h for b, h in zip(bonferroni, rej) if b)


X5 = np.arange(6.0, 11.0)
"""log10 sizes of a five-size ladder, 1e6 to 1e10 parameters."""

R5 = np.array([1.0, -2.0, 0.0, 2.0, -1.0])
"""Residuals orthogonal to 1 and to ``X5``: ``RSS = 10``, ``Sxx = 10``, ``se_fit = sqrt(1/3)``."""


def _trend_at(p: float, sign: int = 1, scale: float = 1.0, delta: float = 1.0):
    """A trend over one build of one seed a size whose two-sided p is ``p``: the points are
    ``slope * x + scale * R5`` with ``slope = t_{3}(1 - p/2) * scale * sqrt(1/3)``."""
    slope = sign * stats.t.isf(p / 2, 3) * scale * math.sqrt(1 / 3)
    return build_trend(10.0 ** X5, [[slope * x + scale * r] for x, r in zip(X5, R5)], delta)


def test_family_verdicts_by_holm():
    """A family of four: p = 0.001 is called (4 x 0.001); p = 0.03, SHRINKS alone, is not
    (3 x 0.03 = 0.09 > 0.05): UNRESOLVED though its unadjusted interval lies below 0; a small
    slope with a tight interval is FLAT; a wide one UNRESOLVED."""
    family = {"grows": _trend_at(0.001), "shrinks alone": _trend_at(0.03, sign=-1),
              "flat": _trend_at(0.6, scale=1e-3, delta=0.05), "wide": _trend_at(0.6, delta=0.05)}
    assert family["grows"].p == pytest.approx(0.001) and family["shrinks alone"].p == (
        pytest.approx(0.03))
    assert [t.verdict for t in family.values()] == ["GROWS", "SHRINKS", "FLAT", "UNRESOLVED"]
    out = family_verdicts(family, alpha=0.05)
    assert [v.verdict for v in out.values()] == ["GROWS", "UNRESOLVED", "FLAT", "UNRESOLVED"]
    held = out["shrinks alone"]
    assert (held.p_adjusted, held.rejected, held.family_size) == (pytest.approx(0.09), False, 4)
    t = family["shrinks alone"]
    assert (held.low, held.high, held.p) == (t.low, t.high, t.p) and held.high < 0
    assert out["grows"].p_adjusted == pytest.approx(0.004)
    negative = family_verdicts({"a": _trend_at(0.001, sign=-1), "b": _trend_at(0.002)})
    assert [v.verdict for v in negative.values()] == ["SHRINKS", "GROWS"]


@pytest.mark.parametrize("call, match", [
    (lambda: holm([]), "non-empty list in"),
    (lambda: holm([0.1, 1.5]), r"in \[0, 1\]"),
    (lambda: holm([0.1, float("nan")]), r"in \[0, 1\]"),
    (lambda: holm([0.1], alpha=0.0), "0 < alpha < 1"),
    (lambda: family_verdicts({}), "at least one trend"),
])
def test_holm_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- two sizes: Welch -----------------------------------------------------------------------

@pytest.mark.parametrize("seed, n_a, n_b", [(0, 3, 3), (1, 3, 5), (2, 6, 4), (3, 2, 7), (4, 2, 2)])
def test_welch_is_scipys(seed, n_a, n_b):
    """Difference b - a, Welch-Satterthwaite df, t, p and the 95% interval are scipy's
    ``ttest_ind(b, a, equal_var=False)``."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0.0, 1.0, n_a), rng.normal(0.5, 2.0, n_b)
    w = welch_compare(a, b)
    ref = stats.ttest_ind(b, a, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert (w.diff / w.se, w.p, w.df) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue),
                                          pytest.approx(ref.df))
    assert (w.low, w.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert w.diff == pytest.approx(b.mean() - a.mean()) and w.verdict in WELCH_VERDICTS


@pytest.mark.parametrize("a, b, verdict, exploratory", [
    ([0.0, 0.1, 0.2], [1.0, 1.1, 1.2], "HIGHER", False),
    ([1.0, 1.1, 1.2], [0.0, 0.1, 0.2], "LOWER", False),
    ([0.0, 0.5, 1.0], [0.2, 0.7, 0.9], "UNRESOLVED", False),
    ([0.0, 0.01], [1.0, 1.01, 1.02], "EXPLORATORY", True),  # p tiny, but 2 builds a side
    ([0.0, 0.01], [1.0, 1.01], "EXPLORATORY", True),
])
def test_welch_verdicts(a, b, verdict, exploratory):
    w = welch_compare(a, b)
    assert (w.verdict, w.exploratory) == (verdict, exploratory), w
    if exploratory:
        assert w.p < 0.05  # computed and shown, but no direction is read from it


@pytest.mark.parametrize("a, b, kw, match", [
    ([1.0], [1.0, 2.0], {}, "points_a must be at least 2 finite"),
    ([1.0, 2.0], [1.0, float("nan")], {}, "points_b must be at least 2 finite"),
    ([1.0, 1.0], [2.0, 2.0], {}, "neither side varies"),
    ([1.0, 2.0], [1.0, 3.0], {"level": 0.0}, "0 < level < 1"),
])
def test_welch_bad_input(a, b, kw, match):
    with pytest.raises(ValueError, match=match):
        welch_compare(a, b, **kw)


def test_a_listed_family_keeps_its_strictness_while_some_tests_are_pending():
    """Two trends of a family of 11 listed: Holm multiplies the smaller p by 11, not 2."""
    from tailtheory.ladder.trend import build_trend, family_verdicts

    sizes = [1e6, 1e6, 3e6, 3e6, 8e6, 8e6]
    a = build_trend(sizes, [[0.0], [0.01], [0.1], [0.12], [0.2], [0.21]], delta=0.01)
    b = build_trend(sizes, [[0.0], [0.2], [0.1], [0.0], [0.2], [0.1]], delta=0.01)
    two = family_verdicts({"a": a, "b": b})
    listed = family_verdicts({"a": a, "b": b}, size=11)
    assert listed["a"].p_adjusted == pytest.approx(min(1.0, 11 * a.p))
    assert listed["a"].p_adjusted >= two["a"].p_adjusted and listed["a"].family_size == 11
    with pytest.raises(ValueError, match="lists 1 tests"):
        family_verdicts({"a": a, "b": b}, size=1)
