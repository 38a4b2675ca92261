"""What the sections of ``tailtheory diagnose``'s report share: the record of a section
(:class:`Section`), what its table reads (:class:`Context`), the report's content
(:class:`Diagnosis`) and the thresholds and wording of the verdict lines. Each section names
its own keys of ``summary.json`` (:attr:`Section.summary`); ``Delta`` is inference minus trainer.

Source: DVP (arXiv 2512.23087; M3-M6, P2, P4), TRM (arXiv 2512.23075; T12), TIM
(arXiv 2605.14220; k1, k3). Each verdict line is derived from the numbers with a named threshold
below; a section without enough data says what it lacks instead of a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tailtheory.diagnose.aggregate import EPS_EDGES

TAIL_HEAD_RATIO = 3.0
"""Tail tokens' mean ``|Delta|`` at least this many times the head's: "concentrated in the tail"."""
EPS_FLAT = 3.0
"""Head and tail implied ``eps`` within this factor: the (1-p) factor alone explains the gap."""
T_SIGNIFICANT = 3.0
"""``|t| >=`` this: a mean (or a regression slope) is called different from 0."""
MIN_GROUP = 30
"""Fewest tokens of a group (head, tail, a sign of the advantage) to report its mean."""
MIN_SEQUENCES = 20
"""Fewest complete responses for M6's regression and TRM's length split."""
LENGTH_BIAS_GAP = 0.10
"""TRM keeps this much more of the shortest responses than of the longest: length-biased."""
PRUNE_CONCENTRATION = 3.0
"""Pruned tokens carry at least this many times their share of ``|Delta|``: DVP targets the
mismatch."""
STEP_GROWTH = 2.0
"""Mean k3 of the last third of the steps this many times the first third's: the mismatch grows."""
TRM_GRID = np.logspace(-6, 1, 29)
"""Thresholds of the acceptance-against-threshold curve (k2 max and k3 avg)."""


@dataclass
class Diagnosis:
    """The report's content: ``summary`` (:data:`tailtheory.diagnose.build.SUMMARY_KEYS`),
    ``inputs`` (the files read), ``tables`` (name -> DataFrame, the data of each figure),
    ``verdicts`` (section -> lines) and ``points`` (figure extras)."""

    summary: dict
    inputs: list = field(default_factory=list)
    tables: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)
    points: dict = field(default_factory=dict)


def mean_t(g: dict) -> tuple[float, float]:
    """Mean of Delta and its t-statistic from the sums (NaN below MIN_GROUP tokens)."""
    n = g["n"]
    if n < MIN_GROUP:
        return math.nan, math.nan
    mean = g["sum_d"] / n
    var = max(g["sum_d2"] / n - mean ** 2, 0.0) * n / (n - 1)
    return mean, (mean / math.sqrt(var / n) if var > 0 else math.nan)


def hist_quantile(counts: np.ndarray, q: float) -> float:
    """The upper edge of the histogram bin holding quantile ``q`` (NaN when empty)."""
    if counts.sum() == 0:
        return math.nan
    j = int(np.searchsorted(np.cumsum(counts), q * counts.sum()))
    return float(10 ** EPS_EDGES[min(j + 1, len(EPS_EDGES) - 1)])


def group_bins(x: np.ndarray, k: int) -> np.ndarray:
    """A bin index per value: one bin per distinct value when there are at most ``k`` of them,
    else ``k`` bins between quantiles (ties kept together). Shapes: (S,) -> (S,) int."""
    uniq = np.unique(x)
    if len(uniq) <= k:
        return np.searchsorted(uniq, x)
    edges = np.unique(np.quantile(x, np.linspace(0, 1, k + 1)))
    return np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)


def num(x, fmt=".3g") -> str:
    """``x`` formatted with ``fmt``; ``n/a`` when it is None or not finite."""
    return "n/a" if x is None or not np.isfinite(x) else format(x, fmt)


def plural(n, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` in agreement: ``1 token``, ``2 tokens`` (``many``: an irregular
    plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def times(ratio: float, more: str = "larger", less: str = "smaller", as_: str = "large") -> str:
    """A ratio ``a / b`` as the words between ``a`` and ``b``: ``"3.2x larger than"`` above 1,
    ``"smaller, 0.64x as large as"`` below, ``"about as large as"`` when it rounds to 1 at two
    significant digits, ``"(n/a) than"`` when undefined. ``more`` / ``less`` / ``as_`` name the
    comparison ("more" / "less" / "much" for a verb)."""
    if ratio is None or not np.isfinite(ratio):
        return f"(ratio n/a) {more} than"
    r = format(ratio, ".2g")
    if float(r) == 1:
        return f"about as {as_} as"
    return f"{r}x {more} than" if ratio > 1 else f"{less}, {r}x as {as_} as"




@dataclass(frozen=True)
class Section:
    """One section of the report, in one module of :mod:`tailtheory.diagnose.sections`.

    - ``name``: the key of its table, verdict lines and figure (``NAME.png``, ``NAME.csv``);
      ``title`` and ``claims``: its heading and the claim ids it rests on.
    - ``table(ctx, d)``: fills :class:`Diagnosis` ``d`` from the sums (summary keys, tables,
      verdict lines, figure extras).
    - ``fold(acc)``: its running sums (``None``: it reads only the shared ones), an object whose
      ``add(tokens)`` folds one batch's :class:`~tailtheory.diagnose.aggregate.Tokens` in.
    - ``figure(d, plt)``: its figure and the data drawn, ``(fig, DataFrame)``; drawn when its
      table has rows.
    - ``files(d)``: further files of the output folder, name -> text.
    - ``summary``: the keys of ``summary.json`` its table writes, key -> what it holds (the
      words of ``docs/diagnose.md``); no two sections share a key.
    """

    name: str
    title: str
    claims: str
    table: Callable[["Context", "Diagnosis"], None]
    fold: Callable[[Any], Any] | None = None
    figure: Callable[["Diagnosis", Any], tuple] | None = None
    files: Callable[["Diagnosis"], dict[str, str]] | None = None
    summary: dict[str, str] = field(default_factory=dict)


@dataclass
class Context:
    """What a section's table reads: the finished sums ``acc``, the complete responses
    ``complete`` (:func:`complete`), TRM's thresholds and the register (rows of
    ``tailtheory.tim.dose.register_table``; ``None`` reads the stored one), the run's model
    parameters (``params``: the ladder's nearest rung; ``None``, its largest) and the bar of
    the certification (``bar``: on each step's mean k3; ``None``, its default) and the step a
    resumed run restarted at (``resume_at``: ``None``, no resume check) and the rollout
    engine's declared precision (``dtype``: ``None``, not declared)."""

    acc: Any
    complete: dict
    delta_max: float
    delta_avg: float
    register: list[dict] | None = None
    params: float | None = None
    bar: float | None = None
    resume_at: int | None = None
    dtype: str | None = None


def complete(acc) -> dict[str, np.ndarray]:
    """Per-response arrays of the responses with every row included (and at least one)."""
    n = acc.n_seq
    s = {k: v[:n] for k, v in acc.seq.items()}
    keep = (s["excluded"] == 0) & (s["n_tok"] > 0)
    out = {k: v[keep] for k, v in s.items()}
    out["mass"], out["index"] = acc.seq_mass[:n][keep], np.flatnonzero(keep)
    return out


def grown(arrays: dict[str, np.ndarray], n: int, fills: dict[str, float]) -> None:
    """Grow each per-response array of ``arrays`` (in place of the dict's values) to hold at
    least ``n`` responses, doubling its capacity; new entries hold ``fills[name]`` (0 when not
    named). A section's fold keeps its own per-response sums so, indexed as the
    :class:`~tailtheory.diagnose.aggregate.Accumulator`'s responses."""
    for k, v in arrays.items():
        if len(v) < n:
            cap = max(2 * len(v), n, 1024)
            arrays[k] = np.concatenate([v, np.full(cap - len(v), fills.get(k, 0.0))])


def json_safe(x):
    """JSON-safe: NaN and +-inf become null, numpy scalars Python numbers."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x
