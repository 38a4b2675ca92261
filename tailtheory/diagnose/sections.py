"""The report's sections from the streaming sums: tables, ``summary.json`` and verdict lines.

Source: DVP (arXiv 2512.23087; M3-M6, P2, P4), TRM (arXiv 2512.23075; T12), TIM
(arXiv 2605.14220; k1, k3). Each verdict line is derived from the numbers with a named threshold
below; a section without enough data says what it lacks instead of a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from tailtheory.diagnose.aggregate import EPS_EDGES, P_EDGES, Accumulator
from tailtheory.mismatch.accumulation import accumulation_regression
from tailtheory.mismatch.logprob import mismatch_bound

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


def _mean_t(g: dict) -> tuple[float, float]:
    """Mean of Delta and its t-statistic from the sums (NaN below MIN_GROUP tokens)."""
    n = g["n"]
    if n < MIN_GROUP:
        return math.nan, math.nan
    mean = g["sum_d"] / n
    var = max(g["sum_d2"] / n - mean ** 2, 0.0) * n / (n - 1)
    return mean, (mean / math.sqrt(var / n) if var > 0 else math.nan)


def _hist_quantile(counts: np.ndarray, q: float) -> float:
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


def _f(x, fmt=".3g") -> str:
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


def envelope(acc: Accumulator, d: Diagnosis) -> None:
    """|Delta| against p with M3's envelope; the head/tail ratio (DVP M3, M7)."""
    import pandas as pd

    b, n = acc.bins, acc.bins["n"]
    nz = n > 0
    q50, q99 = (min(_hist_quantile(acc.eps_hist, q), acc.eps_max) for q in (0.5, 0.99))
    p_mean = b["sum_p"][nz] / n[nz]
    bound = lambda e: (mismatch_bound(torch.from_numpy(p_mean), e, "exact").numpy()  # noqa: E731
                       if np.isfinite(e) else np.full(len(p_mean), np.nan))
    mean_d = b["sum_d"][nz] / n[nz]
    var = np.maximum(b["sum_d2"][nz] / n[nz] - mean_d ** 2, 0) * n[nz] / np.maximum(n[nz] - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        eps_mean = b["sum_eps"][nz] / b["n_eps"][nz]
    d.tables["envelope"] = pd.DataFrame({
        "p_lo": 10 ** P_EDGES[:-1][nz], "p_hi": 10 ** P_EDGES[1:][nz], "p_mean": p_mean,
        "tokens": n[nz].astype(int), "mean_abs_delta": b["sum_abs"][nz] / n[nz],
        "max_abs_delta": b["max_abs"][nz], "mean_delta": mean_d,
        "se_delta": np.sqrt(var / n[nz]), "mean_implied_eps": eps_mean,
        "m3_bound_eps_q50": bound(q50), "m3_bound_eps_q99": bound(q99)})
    d.points["envelope_hist"] = acc.hist
    g = acc.groups
    mean_abs = {k: (g[k]["sum_abs"] / g[k]["n"] if g[k]["n"] >= MIN_GROUP else math.nan)
                for k in ("head", "tail")}
    ratio = mean_abs["tail"] / mean_abs["head"] if mean_abs["head"] > 0 else math.nan
    a = g["all"]
    d.summary.update(tokens=int(a["n"]), k1=acc.sum_k1 / a["n"], k3=acc.sum_k3 / a["n"],
                     abs_delta_mean=a["sum_abs"] / a["n"], abs_delta_max=a["max_abs"],
                     tail_tokens=int(g["tail"]["n"]), head_tokens=int(g["head"]["n"]),
                     tail_abs_delta_mean=mean_abs["tail"], head_abs_delta_mean=mean_abs["head"],
                     tail_head_ratio=ratio, eps_implied_q50=q50, eps_implied_q99=q99,
                     eps_implied_max=acc.eps_max)
    lines = [f"mean |Delta| {_f(a['sum_abs'] / a['n'])}, max {_f(a['max_abs'])} over "
             f"{plural(int(a['n']), 'token')}."]
    if np.isnan(ratio):
        lines.append(f"too few head (p > {acc.head_p:g}: {int(g['head']['n'])}) or tail "
                     f"(p < {acc.tail_p:g}: {int(g['tail']['n'])}) tokens to compare (need "
                     f"{MIN_GROUP} each).")
    else:
        where = ("concentrated in the tail, as DVP's (1-p) law predicts" if ratio >= TAIL_HEAD_RATIO
                 else f"not concentrated in the tail (< {TAIL_HEAD_RATIO:g}x)")
        lines.append(f"tail tokens mismatch {times(ratio, 'more', 'less', 'much')} head tokens "
                     f"(mean |Delta| {_f(mean_abs['tail'])} vs {_f(mean_abs['head'])}): {where}.")
        e = {k: g[k]["sum_eps"] / g[k]["n_eps"] if g[k]["n_eps"] else math.nan
             for k in ("head", "tail")}
        er = e["tail"] / e["head"] if e["head"] > 0 else math.nan
        if np.isfinite(er):
            verdict = ("the (1-p) factor accounts for the gap" if 1 / EPS_FLAT <= er <= EPS_FLAT
                       else "the logits themselves disagree more in the tail" if er > EPS_FLAT
                       else "the head's logits disagree more")
            lines.append(f"M3: the logit perturbation each token implies in the tail is "
                         f"{times(er)} in the head (mean eps {_f(e['tail'])} vs "
                         f"{_f(e['head'])}): {verdict}.")
    lines.append(f"M3's envelope at the 99th percentile of the implied eps ({_f(q99)}) is drawn; "
                 f"median implied eps {_f(q50)}.")
    d.verdicts["envelope"] = lines


def bias(acc: Accumulator, d: Diagnosis) -> None:
    """Mean signed Delta by probability: the tail bias of M4/M5."""
    g = acc.groups
    (m_all, t_all), (m_t, t_t), (m_h, t_h) = (_mean_t(g[k]) for k in ("all", "tail", "head"))
    d.summary.update(mean_delta=m_all, mean_delta_t=t_all, tail_bias=m_t, tail_bias_t=t_t,
                     head_bias=m_h, head_bias_t=t_h)
    d.tables["tail_bias"] = d.tables["envelope"][["p_lo", "p_hi", "p_mean", "tokens",
                                                   "mean_delta", "se_delta"]]

    def says(m, t):
        if not np.isfinite(m):
            return f"n/a, too few tokens (need {MIN_GROUP})"
        if not np.isfinite(t) or abs(t) < T_SIGNIFICANT:
            return f"{_f(m)}, not distinguishable from 0 (|t| < {T_SIGNIFICANT:g})"
        side = "above" if m > 0 else "below"
        return f"{_f(m)} (t = {_f(t, '.2g')}): the sampler's log-prob is {side} the trainer's"

    lines = [f"all tokens: mean Delta {says(m_all, t_all)} (M4 predicts >= 0).",
             f"tail tokens (p < {acc.tail_p:g}): mean Delta {says(m_t, t_t)}.",
             f"head tokens (p > {acc.head_p:g}): mean Delta {says(m_h, t_h)} (M5: near 0)."]
    if np.isfinite(m_t) and np.isfinite(m_h) and abs(t_t) >= T_SIGNIFICANT and m_t > 0:
        lines.append("tail bias: positive on tail tokens, as M4/M5 predict"
                     + (f", {times(m_t / m_h)} the head's." if m_h > 0 else "."))
    (m_p, _), (m_n, _) = _mean_t(g["adv_pos"]), _mean_t(g["adv_neg"])
    if np.isfinite(m_p) and np.isfinite(m_n):
        lines.append(f"by advantage sign (TIM): mean Delta {_f(m_p)} where A > 0, {_f(m_n)} "
                     f"where A < 0.")
    d.verdicts["tail_bias"] = lines


def complete(acc: Accumulator) -> dict[str, np.ndarray]:
    """Per-response arrays of the responses with every row included (and at least one)."""
    n = acc.n_seq
    s = {k: v[:n] for k, v in acc.seq.items()}
    keep = (s["excluded"] == 0) & (s["n_tok"] > 0)
    out = {k: v[keep] for k, v in s.items()}
    out["mass"], out["index"] = acc.seq_mass[:n][keep], np.flatnonzero(keep)
    return out


def accumulation(acc: Accumulator, d: Diagnosis, s: dict) -> None:
    """M6: the sequence log-ratio against the number of tail tokens and sqrt(T)."""
    import pandas as pd

    T, nt, y = s["n_tok"], s["n_tail"], s["log_ratio"]
    d.summary["m6"] = None
    X = np.stack([np.ones_like(T), nt, np.sqrt(T)], 1)
    why = (f"only {len(T)} complete responses (need {MIN_SEQUENCES})" if len(T) < MIN_SEQUENCES
           else "every response has the same length" if np.ptp(T) == 0
           else "every response has the same number of tail tokens" if np.ptp(nt) == 0
           else "tail counts and sqrt(length) are collinear" if np.linalg.matrix_rank(X) < 3
           else "the log-ratio is the same for every response" if np.var(y) == 0 else None)
    if why:
        d.verdicts["accumulation"] = [f"M6's regression on tail tokens and sqrt(T) cannot be "
                                      f"fitted: {why}."]
    else:
        reg = accumulation_regression(*(torch.from_numpy(v) for v in (y, nt, T)))
        d.summary["m6"] = reg
        tt, ts = reg["joint/t_tail"], reg["joint/t_sqrt_T"]
        sig_t, sig_s = abs(tt) >= T_SIGNIFICANT, abs(ts) >= T_SIGNIFICANT
        verdict = ("drifts with the number of tail tokens, not with sqrt(T), as M6 predicts"
                   if sig_t and not sig_s else "drifts with both the tail tokens and sqrt(T)"
                   if sig_t else "drifts with sqrt(T), not with the tail tokens (M6 fails here)"
                   if sig_s else "shows no drift with either (|t| < 3)")
        d.verdicts["accumulation"] = [
            f"sum_t log rho {verdict}: {_f(reg['joint/slope_tail'])} per tail token "
            f"(t = {_f(tt, '.2g')}), {_f(reg['joint/slope_sqrt_T'])} per sqrt(token) "
            f"(t = {_f(ts, '.2g')}), over {len(T)} responses."]
    which = group_bins(nt, 10)
    rows = [dict(n_tail_lo=nt[which == j].min(), n_tail_hi=nt[which == j].max(),
                 responses=int((which == j).sum()), mean_n_tail=nt[which == j].mean(),
                 mean_log_ratio=y[which == j].mean(), sd_log_ratio=y[which == j].std())
            for j in np.unique(which)]
    d.tables["accumulation"] = pd.DataFrame(rows)
    step = max(len(T) // 5000, 1)   # every step-th response: at most ~5000 points drawn
    d.points["accumulation"] = pd.DataFrame({"T": T[::step], "n_tail": nt[::step],
                                             "log_ratio": y[::step]})
