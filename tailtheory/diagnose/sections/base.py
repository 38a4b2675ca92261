"""What the sections of ``tailtheory diagnose``'s report share: the record of a section
(:class:`Section`), what its table reads (:class:`Context`), the report's content
(:class:`Diagnosis`), the keys of ``summary.json`` and the thresholds and wording of the
verdict lines.

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

SUMMARY_KEYS = {
    "files": "dump files read",
    "tokens": "token rows included (finite log-probs)",
    "sequences": "responses (file, step, sample_id) with every row included",
    "steps": "distinct values of step",
    "excluded_rows": "rows left out: a log-prob or a top-k entry is NaN or +-inf",
    "excluded_by_column": "the same per column, named as in the file (a row may count twice)",
    "excluded_sequences": "responses with an excluded row: left out of the sequence sections",
    "k1": "mean over tokens of k1 = -log rho, rho = pi_train / pi_roll (TIM; T12)",
    "k3": "mean over tokens of k3 = rho - 1 - log rho (TIM; T12)",
    "abs_delta_mean": "mean abs(Delta), Delta = log pi_roll - log pi_train (DVP M3)",
    "abs_delta_max": "max abs(Delta)",
    "tail_p": "tail tokens: trainer p < tail_p (M6's TAIL_P)",
    "head_p": "head tokens: trainer p > head_p (M7's HEAD_P)",
    "tail_tokens": "tokens with p < tail_p",
    "head_tokens": "tokens with p > head_p",
    "tail_abs_delta_mean": "mean abs(Delta) of tail tokens (null below MIN_GROUP tokens)",
    "head_abs_delta_mean": "mean abs(Delta) of head tokens (null below MIN_GROUP tokens)",
    "tail_head_ratio": "tail_abs_delta_mean / head_abs_delta_mean (DVP's (1-p) law: > 1)",
    "mean_delta": "mean signed Delta of all tokens (M4: >= 0 in expectation)",
    "mean_delta_t": "its t-statistic",
    "tail_bias": "mean signed Delta of tail tokens (M4/M5: > 0, largest in the tail)",
    "tail_bias_t": "its t-statistic",
    "head_bias": "mean signed Delta of head tokens (M5: near 0)",
    "head_bias_t": "its t-statistic",
    "eps_implied_q50": "median over tokens of the smallest eps M3 needs (implied_eps), to "
                       "0.05 decade",
    "eps_implied_q99": "its 99th percentile (the envelope drawn)",
    "eps_implied_max": "its largest finite value",
    "trm_delta_max": "TRM's threshold on max_t k2 (engine default)",
    "trm_delta_avg": "TRM's threshold on mean_t k3 (engine default)",
    "trm_accept_rate": "fraction of complete responses with max_t k2 <= trm_delta_max (T12)",
    "trm_accept_rate_avg": "fraction with mean_t k3 <= trm_delta_avg",
    "trm_accept_rate_both": "fraction meeting both",
    "trm_token_violation_rate": "q: fraction of tokens with k2 > trm_delta_max",
    "m6": "accumulation_regression of sum_t log rho on tail tokens and sqrt(T) (null when "
          "the data cannot fit it)",
    "dvp": "per rho: pruned_token_frac (sampled tokens outside DVP's min-p set), "
           "abs_delta_share (their share of abs(Delta)), mean_pruned_mass / max_pruned_mass "
           "(m = 1 - pi(S), an upper bound where the list stops early), exact_frac, "
           "p2_bias_bound_mean / _max (R_max sum_t m per response) and, with both lists, "
           "mean_pruned_mass_train (null without top-k columns)",
    "topk_k": "[shortest, longest] top-k list read (null without top-k columns)",
    "rho_mean": "mean over tokens of rho = exp(logp_train - logp_rollout), the raw importance "
                "ratio",
    "rho_min": "smallest rho",
    "rho_max": "largest rho",
    "ratio_caps": "the caps of the engine's corrections (MethodParams): tis_cap, seq_tis_cap, "
                  "IcePop's band band_low / band_high, MIS's band mis_low / mis_high",
    "tis_truncated_frac": "fraction of tokens with rho > tis_cap (truncated by token TIS)",
    "band_masked_frac": "fraction of tokens with rho outside [band_low, band_high] (masked by "
                        "IcePop / token_reject)",
    "seq_tis_truncated_frac": "fraction of complete responses with prod_t rho_t > seq_tis_cap",
    "seq_masked_frac": "fraction of complete responses with prod_t rho_t outside [mis_low, "
                       "mis_high] (masked by MIS)",
    "k3_clamped": "mean over tokens of k3 with rho clamped to [band_low, band_high] (a token "
                  "adds at most the k3 of the band's edge)",
    "k3_outside_share": "share of the summed k3 carried by the tokens outside [band_low, "
                        "band_high]",
    "faults": "the fault checks' warnings: name, level, message, stats (an error refuses the "
              "dumps instead)",
    "bottom_line": "what to do: action (nothing, watch, remedy, reduce_mismatch, "
                   "fix_temperature, no_verdict) and text, with the register's caveat of scale",
}
"""Every key of ``summary.json`` and what it holds; ``Delta`` is inference minus trainer."""


@dataclass
class Diagnosis:
    """The report's content: ``summary`` (:data:`SUMMARY_KEYS`), ``inputs`` (the files read),
    ``tables`` (name -> DataFrame, the data of each figure), ``verdicts`` (section -> lines) and
    ``points`` (figure extras)."""

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
    """

    name: str
    title: str
    claims: str
    table: Callable[["Context", "Diagnosis"], None]
    fold: Callable[[Any], Any] | None = None
    figure: Callable[["Diagnosis", Any], tuple] | None = None
    files: Callable[["Diagnosis"], dict[str, str]] | None = None


@dataclass
class Context:
    """What a section's table reads: the finished sums ``acc``, the complete responses
    ``complete`` (:func:`complete`), TRM's thresholds and the register (rows of
    ``tailtheory.tim.dose.register_table``; ``None`` reads the stored one) and the run's model
    parameters (``params``: the ladder's nearest rung; ``None``, its largest)."""

    acc: Any
    complete: dict
    delta_max: float
    delta_avg: float
    register: list[dict] | None = None
    params: float | None = None


def complete(acc) -> dict[str, np.ndarray]:
    """Per-response arrays of the responses with every row included (and at least one)."""
    n = acc.n_seq
    s = {k: v[:n] for k, v in acc.seq.items()}
    keep = (s["excluded"] == 0) & (s["n_tok"] > 0)
    out = {k: v[keep] for k, v in s.items()}
    out["mass"], out["index"] = acc.seq_mass[:n][keep], np.flatnonzero(keep)
    return out


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
