"""Trend verdicts: an effect against model size, by a rule fixed before measuring.

An effect (a share of tokens, a correlation, a KL estimate k3) is measured on models of several
sizes ``N`` (non-embedding parameters: the rungs of the model-size ladder,
:mod:`tailtheory.engine.start.rungs`). At a size there are independently built models (builds:
two builds of one config are two models), and each build is measured with probe seeds (repeated
measurements of one model). The rule, :func:`build_trend`:

1. **Units are builds.** Build ``j`` (size ``N_j``, probe-seed values ``v_j1 .. v_jS_j``,
   ``S_j >= 1``) is one point: ``x_j = log10 N_j``, ``y_j = mean_s v_js``. With ``log=True``
   every value is first replaced by its ``log10`` (shares, k3; a value <= 0 is refused).
2. **Least squares** of ``y`` on ``x`` over the ``J`` builds (``J >= 3``, at least 3 distinct
   sizes): ``slope = Sxy / Sxx`` with ``Sxx = sum_j (x_j - xbar)^2``, residual sum of squares
   ``RSS``, ``se_fit = sqrt(RSS / (J - 2) / Sxx)``: the builds' scatter about the line, which
   holds build noise and probe noise together.
3. **Within-build noise**: ``s2_within = sum_j sum_s (v_js - y_j)^2 / sum_j (S_j - 1)`` (a build
   with one seed adds nothing; undefined, ``None``, when no build has two), ``S`` the harmonic
   mean of the ``S_j``, ``se_within = sqrt(s2_within / (S * Sxx))``: the slope's se were probe
   noise the only noise (exact when the ``S_j`` are equal). It is a floor: a few builds that
   happen to line up cannot claim less noise than their own probe seeds show.
4. ``se = max(se_fit, se_within)`` (``se_source`` names the larger); ``t = slope / se`` with
   ``J - 2`` degrees of freedom gives the two-sided interval at ``level`` (95%) and the
   two-sided p-value of ``slope = 0``.
5. **Lack of fit** (shown, decides nothing): with ``m`` distinct sizes, pure error
   ``SSPE = sum_j (y_j - ybar_size(j))^2`` (df ``J - m``: builds against their size's mean),
   ``SSLF = RSS - SSPE`` (df ``m - 2``), ``F = (SSLF / (m - 2)) / (SSPE / (J - m))``, p from
   ``F(m - 2, J - m)``: do the sizes' means leave the line by more than builds of one size
   differ? ``None`` without two builds at some size (``J - m < 1``; ``lack_of_fit_note`` says so).
6. **Verdict** (:data:`TREND_VERDICTS`): **GROWS** / **SHRINKS** (the slope's sign) when the
   test of ``slope = 0`` rejects: within a family of trends by Holm's method
   (:func:`family_verdicts`), a trend alone as a family of one at ``1 - level`` unadjusted;
   **FLAT** when it does not reject and the unadjusted interval lies inside
   ``[-delta, +delta]`` per decade (an equivalence test, ``delta`` fixed per claim in advance:
   FLAT says the effect moves by less than ``delta`` per decade, not "cannot tell");
   **UNRESOLVED** otherwise. A called slope whose interval lies inside ``+-delta`` is flagged
   ``within_delta`` (a change is measured, smaller than the claim's bound).

**Holm** (:func:`holm`): for ``m`` p-values sorted ascending, ``p_adj(k) = max_{i <= k}
min(1, (m - i + 1) p_(i))``, rejected when ``p_adj <= alpha``; it controls the family-wise error
rate at ``alpha`` and rejects everything Bonferroni's ``m p <= alpha`` rejects.

**Two sizes** (:func:`welch_compare`): build points at size a against size b, Welch's t:
``d = mean_b - mean_a``, ``se^2 = s_a^2 / n_a + s_b^2 / n_b``, Welch-Satterthwaite df
``se^4 / ((s_a^2 / n_a)^2 / (n_a - 1) + (s_b^2 / n_b)^2 / (n_b - 1))``; HIGHER / LOWER when
``p < 1 - level``, else UNRESOLVED; EXPLORATORY (no direction) while a side has fewer than
:data:`MIN_BUILDS` builds.

**The rule before** (:func:`size_trend`, :class:`Trend`; superseded, kept to re-read the
verdicts stored under it): one mean per size, ``n - 2`` degrees of freedom over ``n`` sizes, the
interval alone deciding. A size's mean pooled the probe seeds of one build, so the spread shown
beside it was probe noise while the noise that moves a size's point is mostly the build's; one
build a size cannot tell build noise from a bent line, and seeds counted as units understate
the noise (``tests/ladder/test_trend.py`` measures both).
:func:`extrapolate` evaluates a fitted line (either rule's) at another size (drawn dashed:
nothing says the trend stays linear in ``log10`` of the size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from tailtheory.experiments.comparison import welch_values

TREND_VERDICTS = ("GROWS", "SHRINKS", "FLAT", "UNRESOLVED")
"""The verdicts of an effect against size."""

LEVEL = 0.95
"""Two-sided confidence level of the slope's interval."""


@dataclass(frozen=True)
class Trend:
    """A trend by the rule before (one mean per size, superseded): ``value = intercept + slope *
    log10(params)``; ``low`` .. ``high`` the slope's interval; ``delta`` the claim's FLAT bound
    per decade."""

    slope: float
    low: float
    high: float
    intercept: float
    n: int
    delta: float
    verdict: str
    within_delta: bool


def size_trend(params, values, delta: float, level: float = LEVEL) -> Trend:
    """The trend of ``values`` (one mean per size) against ``log10(params)`` and its verdict by
    the rule before (superseded: module docstring; :func:`build_trend` is the rule).
    ``params``: positive parameter counts, at least 3 distinct sizes; ``delta``: the FLAT bound
    per decade, > 0. Bad input is a ``ValueError``."""
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


def extrapolate(trend: Trend | BuildTrend, params: float) -> float:
    """The fitted line at ``params`` parameters (e.g. 1e9: a dashed line, not a measurement; in
    ``log10`` units for a :class:`BuildTrend` fitted with ``log=True``)."""
    if not params > 0:
        raise ValueError(f"params must be > 0, got {params}")
    return trend.intercept + trend.slope * math.log10(params)


MIN_BUILDS = 3
"""Builds a side before a two-size comparison gives a direction (fewer: EXPLORATORY)."""

WELCH_VERDICTS = ("HIGHER", "LOWER", "UNRESOLVED", "EXPLORATORY")
"""The verdicts of size b against size a (:func:`welch_compare`)."""


@dataclass(frozen=True)
class LackOfFit:
    """The lack-of-fit test of a trend (module docstring, step 5): ``f`` on ``df1 = m - 2`` and
    ``df2 = J - m`` degrees of freedom, its p-value, and the two sums of squares
    (``ss_lack + ss_pure`` is the trend's ``rss``)."""

    f: float
    df1: int
    df2: int
    p: float
    ss_lack: float
    ss_pure: float


@dataclass(frozen=True)
class BuildTrend:
    """A trend with builds as units (module docstring): ``y = intercept + slope * log10(params)``
    (``y``: a build's mean, of ``log10`` values when ``log``); ``low`` .. ``high`` the slope's
    unadjusted interval at ``level`` with ``df = n_builds - 2``; ``se = max(se_fit, se_within)``
    (``se_source``: ``"fit"`` or ``"within"``; ``se_within`` None when no build has two seeds);
    ``p``: two-sided p of ``slope = 0``; ``seeds``: the harmonic mean of seeds a build;
    ``verdict``: as a family of one (:func:`family_verdicts` decides within a family);
    ``points``: ``(params, y)`` a build, in input order."""

    slope: float
    intercept: float
    low: float
    high: float
    se: float
    se_fit: float
    se_within: float | None
    se_source: str
    df: int
    p: float
    n_builds: int
    n_sizes: int
    seeds: float
    s2_within: float | None
    rss: float
    lack_of_fit: LackOfFit | None
    lack_of_fit_note: str
    delta: float
    level: float
    log: bool
    verdict: str
    within_delta: bool
    points: tuple[tuple[float, float], ...]


def _check_builds(params, seed_values, names, delta, level, log):
    """Validated ``(x (J,), values: list of (S_j,) arrays)`` (``log10`` applied when ``log``)."""
    if isinstance(seed_values, (str, bytes)) or len(params) != len(seed_values):
        raise ValueError(f"params and seed_values must have one entry a build, got {len(params)} "
                         f"params and {len(seed_values)} seed lists")
    if not (math.isfinite(delta) and delta > 0) or not 0 < level < 1:
        raise ValueError(f"need delta > 0 and 0 < level < 1, got delta={delta}, level={level}")
    x = np.asarray(params, dtype=float)
    if x.ndim != 1 or not (np.all(np.isfinite(x)) and np.all(x > 0)):
        raise ValueError(f"params must be one finite number > 0 a build, got {list(params)}")
    names = [f"build {j} ({n:g} params)" for j, n in enumerate(x)] if names is None else names
    if len(names) != len(x):
        raise ValueError(f"names must have one entry a build, got {len(names)} for {len(x)} "
                         f"builds")
    values = []
    for name, v in zip(names, seed_values):
        v = np.asarray(v, dtype=float)
        if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
            raise ValueError(f"{name}: its probe-seed values must be a non-empty list of finite "
                             f"numbers, got {v.tolist()}")
        if log and not np.all(v > 0):
            raise ValueError(f"{name}: a value of zero or below cannot be trended in log10, "
                             f"got {v.tolist()}")
        values.append(np.log10(v) if log else v)
    if len(x) < 3 or len(set(x.tolist())) < 3:
        raise ValueError(f"a trend needs at least 3 builds at 3 distinct sizes (J - 2 >= 1 "
                         f"degrees of freedom), got {len(x)} builds at {len(set(x.tolist()))}")
    return np.log10(x), values


def _t_test(est: float, se: float, df: float, level: float) -> tuple[float, float, float]:
    """``(low, high, p)``: the two-sided t interval at ``level`` and the p-value of 0, on ``df``
    degrees of freedom (``se = 0``: the interval is the point, p is 0, or 1 at ``est = 0``)."""
    if se == 0:
        return est, est, 0.0 if est != 0 else 1.0
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return est - half, est + half, float(2 * stats.t.sf(abs(est) / se, df))


def _within(values) -> tuple[float | None, float]:
    """``(s2_within, S)``: the pooled variance of probe seeds within builds (None when no build
    has two) and the harmonic mean of the seeds a build."""
    dof = sum(len(v) - 1 for v in values)
    ss = sum(float(((v - v.mean()) ** 2).sum()) for v in values)
    S = len(values) / sum(1 / len(v) for v in values)
    return (ss / dof if dof > 0 else None), S


def lack_of_fit(x, y, rss: float) -> tuple[LackOfFit | None, str]:
    """The lack-of-fit test of a line fitted to points ``(x, y)`` (one a build) with residual
    sum of squares ``rss`` (module docstring, step 5) and ``""``; or None and why not."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    sizes = sorted(set(x.tolist()))
    J, m = len(x), len(sizes)
    if J - m < 1 or m - 2 < 1:
        return None, (f"no lack-of-fit test: it needs two builds at some size (J - m = {J - m}) "
                      f"and 3 sizes (m - 2 = {m - 2})")
    ss_pure = sum(float(((y[x == s] - y[x == s].mean()) ** 2).sum()) for s in sizes)
    ss_lack = max(rss - ss_pure, 0.0)  # >= 0 in exact arithmetic: the line is one of the fits
    if ss_pure == 0:
        if ss_lack == 0:
            return None, "no lack-of-fit test: every point lies on the line"
        return LackOfFit(math.inf, m - 2, J - m, 0.0, ss_lack, ss_pure), ""
    f = (ss_lack / (m - 2)) / (ss_pure / (J - m))
    return LackOfFit(f, m - 2, J - m, float(stats.f.sf(f, m - 2, J - m)), ss_lack, ss_pure), ""


def build_trend(params, seed_values, delta: float, log: bool = False, names=None,
                level: float = LEVEL) -> BuildTrend:
    """The trend of an effect against size with builds as units (module docstring).
    ``params`` (J,): each build's size, > 0, at least 3 distinct; ``seed_values``: each build's
    probe-seed values (>= 1 finite); ``delta``: the FLAT bound per decade, > 0; ``log``: trend
    ``log10`` of the values; ``names``: each build's name for error messages. Bad input is a
    ``ValueError`` that says what is wrong."""
    x, values = _check_builds(params, seed_values, names, delta, level, log)
    y = np.array([v.mean() for v in values])  # (J,)
    J = len(x)
    xc = x - x.mean()
    sxx = float(xc @ xc)
    slope = float(xc @ (y - y.mean())) / sxx
    intercept = float(y.mean() - slope * x.mean())
    resid = y - intercept - slope * x
    rss = float(resid @ resid)
    se_fit = math.sqrt(rss / (J - 2) / sxx)
    s2_within, S = _within(values)
    se_within = None if s2_within is None else math.sqrt(s2_within / (S * sxx))
    se_source = "within" if se_within is not None and se_within > se_fit else "fit"
    se = se_within if se_source == "within" else se_fit
    low, high, p = _t_test(slope, se, J - 2, level)
    verdict, within = _verdict(slope, p <= 1 - level, low, high, delta)
    lof, note = lack_of_fit(x, y, rss)
    return BuildTrend(slope, intercept, low, high, se, se_fit, se_within, se_source, J - 2, p, J,
                      len(set(x.tolist())), S, s2_within, rss, lof, note, float(delta), level,
                      log, verdict, within, tuple(zip(map(float, params), y.tolist())))


def _verdict(slope: float, rejected: bool, low: float, high: float, delta: float):
    """``(verdict, within_delta)`` (module docstring, step 6)."""
    inside = -delta <= low and high <= delta
    if rejected:
        return ("GROWS" if slope > 0 else "SHRINKS"), inside
    return ("FLAT" if inside else "UNRESOLVED"), False


def holm(p_values, alpha: float = 0.05) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """Holm's step-down method: ``(p_adjusted, rejected)`` in input order. Sorted ascending,
    ``p_adj(k) = max_{i <= k} min(1, (m - i + 1) p_(i))``; ``rejected``: ``p_adj <= alpha``.
    Controls the family-wise error rate at ``alpha`` (Holm 1979, Scand. J. Statist. 6:65-70)."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1 or p.size == 0 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p_values must be a non-empty list in [0, 1], got {list(p_values)}")
    if not 0 < alpha < 1:
        raise ValueError(f"need 0 < alpha < 1, got {alpha}")
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    adj = np.empty(m)
    adj[order] = stepped
    return tuple(adj.tolist()), tuple(bool(a <= alpha) for a in adj)


@dataclass(frozen=True)
class FamilyVerdict:
    """One trend's verdict within its family (:func:`family_verdicts`): ``p`` raw and
    ``p_adjusted`` (Holm over ``family_size`` trends), ``rejected`` at ``alpha``; ``low`` ..
    ``high`` the unadjusted interval (FLAT reads it), shown beside the adjusted p."""

    verdict: str
    slope: float
    p: float
    p_adjusted: float
    rejected: bool
    low: float
    high: float
    delta: float
    within_delta: bool
    alpha: float
    family_size: int


def family_verdicts(trends: dict, alpha: float = 0.05,
                    size: int | None = None) -> dict[str, FamilyVerdict]:
    """Name -> final verdict of each trend of a family (a dict of :class:`BuildTrend`, the family
    listed before measuring): GROWS / SHRINKS when Holm at ``alpha`` rejects ``slope = 0`` (the
    slope's sign), FLAT when it does not and the unadjusted interval lies inside ``+-delta``,
    else UNRESOLVED. ``size``: the family as listed, when some of its tests have no trend yet;
    each missing one counts with ``p = 1`` (Holm stays at the listed family's strictness: a test
    that is measured later never loosens the others' correction)."""
    if not trends:
        raise ValueError("a family needs at least one trend")
    names = list(trends)
    size = len(names) if size is None else size
    if size < len(names):
        raise ValueError(f"the family lists {size} tests but {len(names)} trends were given")
    adj, rej = holm([trends[n].p for n in names] + [1.0] * (size - len(names)), alpha)
    out = {}
    for name, a, r in zip(names, adj, rej):
        t = trends[name]
        verdict, within = _verdict(t.slope, r, t.low, t.high, t.delta)
        out[name] = FamilyVerdict(verdict, t.slope, t.p, a, r, t.low, t.high, t.delta, within,
                                  alpha, size)
    return out


@dataclass(frozen=True)
class Welch:
    """Size b against size a on build points (:func:`welch_compare`): ``diff = mean_b - mean_a``,
    its ``se``, Welch-Satterthwaite ``df``, the interval at ``level``, the two-sided ``p``;
    ``exploratory`` when a side has fewer than :data:`MIN_BUILDS` builds (``verdict``
    EXPLORATORY then, no direction)."""

    diff: float
    se: float
    df: float
    low: float
    high: float
    p: float
    n_a: int
    n_b: int
    level: float
    exploratory: bool
    verdict: str


def welch_compare(points_a, points_b, level: float = LEVEL) -> Welch:
    """Welch's t of build points at size b against size a (module docstring); at least 2 finite
    points a side, and not both sides without spread. Bad input is a ``ValueError``."""
    a, b = np.asarray(points_a, dtype=float), np.asarray(points_b, dtype=float)
    for side, v in (("a", a), ("b", b)):
        if v.ndim != 1 or len(v) < 2 or not np.all(np.isfinite(v)):
            raise ValueError(f"points_{side} must be at least 2 finite build points, "
                             f"got {v.tolist()}")
    w = welch_values(b, a, level)            # the interval of the training comparisons, b - a
    _, _, p = _t_test(w.delta, w.se, w.df, level)
    exploratory = min(len(a), len(b)) < MIN_BUILDS
    verdict = ("EXPLORATORY" if exploratory else "UNRESOLVED" if not p < 1 - level else
               "HIGHER" if w.delta > 0 else "LOWER")
    return Welch(w.delta, w.se, float(w.df), w.low, w.high, p, len(a), len(b), level,
                 exploratory, verdict)
