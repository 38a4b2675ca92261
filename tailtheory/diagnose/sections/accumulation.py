"""M6: the sequence log-ratio against the number of tail tokens and sqrt(T).

Source: DVP (arXiv 2512.23087; M6),
:func:`tailtheory.mismatch.accumulation.accumulation_regression`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.sections.base import (MIN_SEQUENCES, T_SIGNIFICANT, Diagnosis, Section,
                                               group_bins, num)
from tailtheory.mismatch.accumulation import accumulation_regression, sequence_log_ratio


NAME = "accumulation"


class AccumulationSums:
    """Per response: its tail tokens and ``sum_t log rho_t`` (M6's ``-sum_t Delta_t``), in the
    per-response table of the :class:`~tailtheory.diagnose.aggregate.Accumulator`."""

    def __init__(self, acc):
        self.acc = acc

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        s, n = self.acc.seq, self.acc.n_seq
        s["n_tail"][:n] += np.bincount(t.idx, weights=t.tail, minlength=n)
        contrib = sequence_log_ratio(torch.from_numpy(t.Delta)[:, None]).numpy()  # -Delta_t
        s["log_ratio"][:n] += np.bincount(t.idx, weights=contrib, minlength=n)


def accumulation(acc: Accumulator, d: Diagnosis, s: dict) -> None:
    """M6: the sequence log-ratio against the number of tail tokens and sqrt(T)."""
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
            f"sum_t log rho {verdict}: {num(reg['joint/slope_tail'])} per tail token "
            f"(t = {num(tt, '.2g')}), {num(reg['joint/slope_sqrt_T'])} per sqrt(token) "
            f"(t = {num(ts, '.2g')}), over {len(T)} responses."]
    which = group_bins(nt, 10)
    rows = [dict(n_tail_lo=nt[which == j].min(), n_tail_hi=nt[which == j].max(),
                 responses=int((which == j).sum()), mean_n_tail=nt[which == j].mean(),
                 mean_log_ratio=y[which == j].mean(), sd_log_ratio=y[which == j].std())
            for j in np.unique(which)]
    d.tables["accumulation"] = pd.DataFrame(rows)
    step = max(len(T) // 5000, 1)   # every step-th response: at most ~5000 points drawn
    d.points["accumulation"] = pd.DataFrame({"T": T[::step], "n_tail": nt[::step],
                                             "log_ratio": y[::step]})


def _figure(d: Diagnosis, plt):
    pts, t = d.points["accumulation"], d.tables["accumulation"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.8), sharey=True)
    a.plot(pts.n_tail, pts.log_ratio, ".", alpha=0.3, ms=3)
    a.plot(t.mean_n_tail, t.mean_log_ratio, "o-", color="C3", label="mean per group")
    a.set(xlabel="tail tokens in the response", ylabel="sum_t log rho = log pi_train/pi_roll",
          title="M6: drift with tail tokens")
    a.legend(fontsize=7)
    b.plot(np.sqrt(pts["T"]), pts.log_ratio, ".", alpha=0.3, ms=3, color="C2")
    b.set(xlabel="sqrt(response length)", title="... or with sqrt(T)")
    data = pd.concat([pts.assign(kind="response"), t.assign(kind="group")], ignore_index=True)
    return fig, data


SUMMARY = {
    "m6": "accumulation_regression of sum_t log rho on tail tokens and sqrt(T) (null when "
          "the data cannot fit it)",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Sequence log-ratio against the number of tail tokens", "M6",
                  lambda ctx, d: accumulation(ctx.acc, d, ctx.complete), AccumulationSums,
                  _figure, summary=SUMMARY)
