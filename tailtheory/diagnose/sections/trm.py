"""T12: TRM's acceptance against threshold and against length, with ``(1 - q)^T``.

Source: TRM (arXiv 2512.23075; T12): its sampled-token filters, k2 for the max and k3 for the
average (:func:`tailtheory.trm.mask.trm_mask`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.sections.base import (LENGTH_BIAS_GAP, MIN_SEQUENCES, TRM_GRID, Diagnosis,
                                               Section, group_bins, num)
from tailtheory.trm.mask import acceptance_prob, trm_mask


NAME = "trm"
LENGTH_BINS = 4
"""Length groups of TRM's length panel: quartiles, or each length when there are at most 4."""


class TrmSums:
    """Tokens with ``k2 > delta_max`` (TRM's per-token violations), and per response
    ``max_t k2`` and ``sum_t k3``."""

    def __init__(self, acc):
        self.acc, self.violations = acc, 0

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        self.violations += int((t.kk2 > self.acc.delta_max).sum())
        s, n = self.acc.seq, self.acc.n_seq
        s["sum_k3"][:n] += np.bincount(t.idx, weights=t.kk3, minlength=n)
        np.maximum.at(s["max_k2"], t.idx, t.kk2)


def accept(stat: np.ndarray, criterion: str, threshold: float) -> np.ndarray:
    """TRM's keep of each response from its per-response statistic (T12).

    Source: TRM (T12). ``stat`` is ``max_t k2`` (criterion ``max``) or ``mean_t k3`` (``avg``),
    accumulated over batches; ``trm_mask`` on one column of it gives
    ``keep = stat <= threshold``, the same as ``trm_mask`` on the ``(B, T)`` log-ratios.
    Shapes: stat (S,) -> (S,) bool.
    """
    kl = torch.from_numpy(np.asarray(stat, np.float64))[:, None]          # (S, 1)
    mask = torch.ones_like(kl, dtype=torch.bool)
    kw = {"delta_max": threshold} if criterion == "max" else {"delta_avg": threshold}
    return trm_mask(mask, criterion, kl=kl, **kw).numpy()


def trm(acc: Accumulator, d: Diagnosis, s: dict, delta_max: float, delta_avg: float) -> None:
    """T12: acceptance against threshold and against length, with ``(1 - q)^T``."""
    T, max_k2 = s["n_tok"], s["max_k2"]
    mean_k3 = s["sum_k3"] / np.maximum(T, 1)
    q = acc.folds[NAME].violations / max(acc.groups["all"]["n"], 1)
    d.summary.update(trm_delta_max=delta_max, trm_delta_avg=delta_avg,
                     trm_token_violation_rate=q)
    if len(T) == 0:
        d.summary.update(trm_accept_rate=None, trm_accept_rate_avg=None,
                         trm_accept_rate_both=None)
        d.verdicts["trm"] = ["no complete response: TRM's acceptance is undefined."]
        return
    keep_max, keep_avg = accept(max_k2, "max", delta_max), accept(mean_k3, "avg", delta_avg)
    d.summary.update(trm_accept_rate=float(keep_max.mean()),
                     trm_accept_rate_avg=float(keep_avg.mean()),
                     trm_accept_rate_both=float((keep_max & keep_avg).mean()))
    rows = [dict(kind="threshold", threshold=t, accept_max_k2=accept(max_k2, "max", t).mean(),
                 accept_avg_k3=accept(mean_k3, "avg", t).mean()) for t in TRM_GRID]
    pred = {int(t): float(acceptance_prob(q, int(t))) for t in np.unique(T)}
    predicted = np.array([pred[int(t)] for t in T])
    which = group_bins(T, LENGTH_BINS)
    for j in np.unique(which):
        sel = which == j
        rows.append(dict(kind="length", length_lo=T[sel].min(), length_hi=T[sel].max(),
                         responses=int(sel.sum()), accept_max_k2=keep_max[sel].mean(),
                         predicted_iid=predicted[sel].mean()))
    d.tables["trm"] = pd.DataFrame(rows)
    lines = [f"TRM keeps {num(100 * keep_max.mean(), '.3g')}% of {len(T)} responses with "
             f"max_t k2 <= {delta_max:g}, {num(100 * keep_avg.mean(), '.3g')}% with mean_t k3 <= "
             f"{delta_avg:g}, {num(100 * (keep_max & keep_avg).mean(), '.3g')}% with both "
             f"(per-token violation rate q = {num(q)})."]
    length = d.tables["trm"].query("kind == 'length'")
    if len(T) >= MIN_SEQUENCES and len(length) >= 2:
        lo, hi = length.iloc[0], length.iloc[-1]
        gap = lo.accept_max_k2 - hi.accept_max_k2
        span = lambda r: (f"{int(r.length_lo)}" if r.length_lo == r.length_hi  # noqa: E731
                          else f"{int(r.length_lo)}-{int(r.length_hi)}")
        tok = lambda r: "token" if r.length_lo == r.length_hi == 1 else "tokens"  # noqa: E731
        lines.append(f"the shortest responses ({span(lo)} {tok(lo)}) keep "
                     f"{num(100 * lo.accept_max_k2, '.3g')}%, the longest ({span(hi)}) "
                     f"{num(100 * hi.accept_max_k2, '.3g')}%; (1 - q)^T "
                     f"predicts {num(100 * lo.predicted_iid, '.3g')}% and "
                     f"{num(100 * hi.predicted_iid, '.3g')}%: "
                     + ("length-biased, as T12 predicts." if gap >= LENGTH_BIAS_GAP else
                        f"no length bias beyond {LENGTH_BIAS_GAP:.0%}."))
    d.verdicts["trm"] = lines


def _figure(d: Diagnosis, plt):
    t = d.tables["trm"]
    th, ln = t[t.kind == "threshold"], t[t.kind == "length"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    a.plot(th.threshold, th.accept_max_k2, "o-", ms=3, label="max_t k2 <= delta_max")
    a.plot(th.threshold, th.accept_avg_k3, "s-", ms=3, label="mean_t k3 <= delta_avg")
    for key, c in (("trm_delta_max", "C0"), ("trm_delta_avg", "C1")):
        a.axvline(d.summary[key], color=c, ls=":", lw=1)
    a.set(xscale="log", xlabel="threshold", ylabel="responses kept",
          title="TRM acceptance (T12)", ylim=(-0.02, 1.02))
    a.legend(fontsize=7)
    mid = (ln.length_lo + ln.length_hi) / 2
    b.plot(mid, ln.accept_max_k2, "o-", label="measured (max k2)")
    b.plot(mid, ln.predicted_iid, "k--", label="(1 - q)^T")
    b.set(xlabel="response length (group mean of its range)", ylabel="responses kept",
          ylim=(-0.02, 1.02),
          title="Length bias")
    b.legend(fontsize=7)
    return fig, t


SUMMARY = {
    "trm_delta_max": "TRM's threshold on max_t k2 (engine default)",
    "trm_delta_avg": "TRM's threshold on mean_t k3 (engine default)",
    "trm_accept_rate": "fraction of complete responses with max_t k2 <= trm_delta_max (T12)",
    "trm_accept_rate_avg": "fraction with mean_t k3 <= trm_delta_avg",
    "trm_accept_rate_both": "fraction meeting both",
    "trm_token_violation_rate": "q: fraction of tokens with k2 > trm_delta_max",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "TRM's acceptance against threshold and length", "T12",
                  lambda ctx, d: trm(ctx.acc, d, ctx.complete, ctx.delta_max, ctx.delta_avg),
                  TrmSums, _figure, summary=SUMMARY)
