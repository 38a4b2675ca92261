"""The one verdict rule of every training claim, and a measurement that selects arms by tag.

A :class:`Measurement` holds a study's numbers (label -> one row per seed, ``{"seed": ...,
numbers...}``) with its arms' tags; :meth:`Measurement.compare` (:func:`compare_values`) is the
rule:

    delta = mean_s(x_a) - mean_s(x_b),   se = sqrt(var_s(x_a)/n_a + var_s(x_b)/n_b)

``TOY-SCALE`` when ``delta > Z_CRIT * se``, ``REFUTED`` when ``delta < -Z_CRIT * se``,
``NOT-REPRODUCED`` otherwise (``Z_CRIT = 2``). :func:`worst` combines the parts of a claim.

With three seeds an arm, 2 standard errors is too narrow: :func:`welch_values` gives the same
difference with Welch's t interval (Welch-Satterthwaite degrees of freedom), the rule of the
studies that run three seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping

from tailtheory.core.registry import Verdict

Z_CRIT = 2.0
"""An ordering counts when the difference of seed means exceeds 2 standard errors."""


def mean_se(xs) -> tuple[float, float]:
    """Mean and standard error of the mean (sample variance, ``n - 1``) of ``xs``; the error is
    NaN for one value (undefined), and no values is a ``ValueError``."""
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("mean_se of no values")
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b`` over seeds: the difference of means, its standard error, the verdict."""

    delta: float
    se: float
    verdict: Verdict

    @property
    def z(self) -> float:
        """``delta / se`` (infinite with the sign of ``delta`` when ``se`` is 0)."""
        return self.delta / self.se if self.se else math.copysign(math.inf, self.delta)


def compare_values(xa, xb) -> Comparison:
    """The module rule on two lists of per-seed values (at least 2 each)."""
    xa, xb = list(xa), list(xb)
    if min(len(xa), len(xb)) < 2:
        raise ValueError(f"need >= 2 seeds per configuration to compare, got {len(xa)}, {len(xb)}")
    var = lambda x: sum((v - sum(x) / len(x)) ** 2 for v in x) / (len(x) - 1)  # noqa: E731
    delta = sum(xa) / len(xa) - sum(xb) / len(xb)
    se = math.sqrt(var(xa) / len(xa) + var(xb) / len(xb))
    verdict = (Verdict.TOY_SCALE if delta > Z_CRIT * se else
               Verdict.REFUTED if delta < -Z_CRIT * se else Verdict.NOT_REPRODUCED)
    return Comparison(delta, se, verdict)


@dataclass(frozen=True)
class WelchComparison:
    """``a`` against ``b`` over seeds by Welch's t: ``delta = mean_a - mean_b``, its ``se``, the
    Welch-Satterthwaite ``df`` and the two-sided interval ``[low, high]`` at ``level``."""

    delta: float
    se: float
    df: float
    low: float
    high: float
    level: float


def welch_values(xa, xb, level: float = 0.95) -> WelchComparison:
    """Welch's t interval of ``mean(xa) - mean(xb)`` (at least 2 finite values a side; both
    sides without spread is a ``ValueError``: the interval would be a point)."""
    from scipy import stats

    xa, xb = [float(x) for x in xa], [float(x) for x in xb]
    if min(len(xa), len(xb)) < 2 or not all(map(math.isfinite, xa + xb)):
        raise ValueError(f"Welch's t needs >= 2 finite values a side, got {xa} and {xb}")
    if not 0 < level < 1:
        raise ValueError(f"need 0 < level < 1, got {level}")
    (ma, sa), (mb, sb) = mean_se(xa), mean_se(xb)
    va, vb = sa ** 2, sb ** 2
    if va + vb == 0:
        raise ValueError("Welch's t is undefined when neither side varies")
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return WelchComparison(ma - mb, se, df, ma - mb - half, ma - mb + half, level)


def compare(data: Mapping, a: str, b: str, key: str) -> Comparison:
    """Arm ``a`` of ``data`` (label -> rows over seeds) against arm ``b`` on ``key``."""
    return compare_values([r[key] for r in data[a]], [r[key] for r in data[b]])


def worst(*verdicts: Verdict) -> Verdict:
    """REFUTED beats NOT-REPRODUCED beats TOY-SCALE: a claim with several parts needs them all."""
    for v in (Verdict.REFUTED, Verdict.NOT_REPRODUCED):
        if v in verdicts:
            return v
    return Verdict.TOY_SCALE


class Measurement(Mapping):
    """A study's numbers: label -> one row per seed (``{"seed": ..., numbers...}``), with the
    arms' tags. Reads like the plain dict it wraps (``m[label]``, ``list(m)``)."""

    def __init__(self, data: Mapping, arms=(), study: str = "", missing: Mapping | None = None):
        self.data = dict(data)
        self.tags = {a.label: dict(a.tags) for a in arms}
        self.study = study
        self.missing = dict(missing or {})
        """Label -> seeds of the study's plan not measured yet (an incremental study's)."""

    def __getitem__(self, label):
        if label not in self.data:
            raise KeyError(f"{self.study or 'measurement'} has no arm {label!r}; arms: "
                           f"{', '.join(self.data)}")
        return self.data[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def labels(self, **tags) -> list[str]:
        """Labels of the measured arms whose tags match ``tags`` (in the study's order)."""
        return [lb for lb in self.data
                if all(k in (t := {**self.tags.get(lb, {}), "label": lb}) and t[k] == v
                       for k, v in tags.items())]

    def label(self, **tags) -> str:
        """The one measured arm whose tags match; none or several is a ``ValueError``."""
        found = self.labels(**tags)
        if len(found) != 1:
            raise ValueError(f"{len(found)} arms match {tags}: {found}")
        return found[0]

    def per_seed(self, label: str, key: str) -> list:
        """``key`` of every seed of arm ``label``."""
        return [r[key] for r in self[label]]

    def mean(self, label: str, key: str) -> float:
        """Mean over seeds of ``key`` of arm ``label``."""
        return mean_se(self.per_seed(label, key))[0]

    def compare(self, a: str, b: str, key: str) -> Comparison:
        """Arm ``a`` against arm ``b`` on ``key`` over seeds (the module rule)."""
        return compare_values(self.per_seed(a, key), self.per_seed(b, key))

    def table(self):
        """One row per run (``label``, ``seed`` and every scalar number), as a pandas frame."""
        import pandas as pd

        return pd.DataFrame([{"label": lb, **{k: v for k, v in r.items()
                                              if not isinstance(v, (list, dict))}}
                             for lb, rows in self.data.items() for r in rows])

    def curves(self, series=("reward", "eval"), labels=None):
        """Long table ``label, seed, step, metric, value`` of per-step ``series`` (lists over
        steps); ``eval`` is the held-out accuracy at its ``eval_steps``."""
        import pandas as pd

        rows = []
        for lb in (list(self.data) if labels is None else labels):
            for r in self[lb]:
                for name in series:
                    if name == "eval":
                        rows += [{"label": lb, "seed": r["seed"], "step": t,
                                  "metric": "held-out accuracy", "value": v}
                                 for t, v in zip(r["eval_steps"], r["eval"])]
                    else:
                        rows += [{"label": lb, "seed": r["seed"], "step": t, "metric": name,
                                  "value": v} for t, v in enumerate(r[name])]
        return pd.DataFrame(rows, columns=["label", "seed", "step", "metric", "value"])
