"""Mean signed Delta by probability: the tail bias of M4 / M5, and its split by the sign of
the advantage (TIM).

Source: DVP (arXiv 2512.23087; M4, M5), TIM (arXiv 2605.14220). The table is the envelope's,
so this section follows it.
"""

from __future__ import annotations

import numpy as np

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.sections.base import (MIN_GROUP, T_SIGNIFICANT, Diagnosis, Section,
                                               mean_t, num, times)


NAME = "tail_bias"


def bias(acc: Accumulator, d: Diagnosis) -> None:
    """Mean signed Delta by probability: the tail bias of M4/M5."""
    g = acc.groups
    (m_all, t_all), (m_t, t_t), (m_h, t_h) = (mean_t(g[k]) for k in ("all", "tail", "head"))
    d.summary.update(mean_delta=m_all, mean_delta_t=t_all, tail_bias=m_t, tail_bias_t=t_t,
                     head_bias=m_h, head_bias_t=t_h)
    d.tables["tail_bias"] = d.tables["envelope"][["p_lo", "p_hi", "p_mean", "tokens",
                                                   "mean_delta", "se_delta"]]

    def says(m, t):
        if not np.isfinite(m):
            return f"n/a, too few tokens (need {MIN_GROUP})"
        if not np.isfinite(t) or abs(t) < T_SIGNIFICANT:
            return f"{num(m)}, not distinguishable from 0 (|t| < {T_SIGNIFICANT:g})"
        side = "above" if m > 0 else "below"
        return f"{num(m)} (t = {num(t, '.2g')}): the sampler's log-prob is {side} the trainer's"

    lines = [f"all tokens: mean Delta {says(m_all, t_all)} (M4 predicts >= 0).",
             f"tail tokens (p < {acc.tail_p:g}): mean Delta {says(m_t, t_t)}.",
             f"head tokens (p > {acc.head_p:g}): mean Delta {says(m_h, t_h)} (M5: near 0)."]
    if np.isfinite(m_t) and np.isfinite(m_h) and abs(t_t) >= T_SIGNIFICANT and m_t > 0:
        lines.append("tail bias: positive on tail tokens, as M4/M5 predict"
                     + (f", {times(m_t / m_h)} the head's." if m_h > 0 else "."))
    (m_p, _), (m_n, _) = mean_t(g["adv_pos"]), mean_t(g["adv_neg"])
    if np.isfinite(m_p) and np.isfinite(m_n):
        lines.append(f"by advantage sign (TIM): mean Delta {num(m_p)} where A > 0, {num(m_n)} "
                     f"where A < 0.")
    d.verdicts["tail_bias"] = lines


def _figure(d: Diagnosis, plt):
    t = d.tables["tail_bias"]
    t = t[t.tokens >= 2]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.errorbar(t.p_mean, t.mean_delta, yerr=2 * t.se_delta, fmt="o", ms=4, capsize=2)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xscale="log", xlabel="trainer p of the sampled token",
           ylabel="mean Delta (+- 2 se)", title="Tail bias: log pi_roll - log pi_train (M4/M5)")
    return fig, d.tables["tail_bias"]


SUMMARY = {
    "mean_delta": "mean signed Delta of all tokens (M4: >= 0 in expectation)",
    "mean_delta_t": "its t-statistic",
    "tail_bias": "mean signed Delta of tail tokens (M4/M5: > 0, largest in the tail)",
    "tail_bias_t": "its t-statistic",
    "head_bias": "mean signed Delta of head tokens (M5: near 0)",
    "head_bias_t": "its t-statistic",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Mean signed Delta by probability: the tail bias", "M4, M5",
                  lambda ctx, d: bias(ctx.acc, d), figure=_figure,
                  summary=SUMMARY)
