"""|Delta| against p with M3's envelope, and the head/tail ratio (DVP M3, M7).

Source: DVP (arXiv 2512.23087): M3's bound ``log(1 + (1 - p)(e^{2 eps} - 1))`` drawn at the
quantiles of the ``eps`` each token implies (:func:`~tailtheory.diagnose.aggregate.implied_eps`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from matplotlib.colors import LogNorm

from tailtheory.diagnose.aggregate import ABS_EDGES, EPS_EDGES, P_EDGES, Accumulator
from tailtheory.diagnose.sections.base import (EPS_FLAT, MIN_GROUP, TAIL_HEAD_RATIO, Diagnosis,
                                               Section, hist_quantile, num, plural, times)
from tailtheory.mismatch.logprob import mismatch_bound


NAME = "envelope"


class EnvelopeSums:
    """The envelope's own sums: the ``(log10 p, log10 |Delta|)`` histogram and that of the
    implied ``eps`` (its largest finite value, the count where it is undefined)."""

    def __init__(self, acc):
        self.hist = np.zeros((len(P_EDGES) - 1, len(ABS_EDGES) - 1))
        self.eps_hist, self.eps_max, self.eps_undefined = np.zeros(len(EPS_EDGES) - 1), 0.0, 0

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        la = np.clip(np.log10(np.maximum(t.a, 1e-300)), ABS_EDGES[0], ABS_EDGES[-1] - 1e-9)
        self.hist += np.histogram2d(t.bin_, la, bins=(np.arange(len(P_EDGES)), ABS_EDGES))[0]
        fin = np.isfinite(t.eps)
        self.eps_undefined += int((~fin).sum())
        le = np.clip(np.log10(np.maximum(t.eps[fin], 1e-300)), EPS_EDGES[0], EPS_EDGES[-1] - 1e-9)
        self.eps_hist += np.histogram(le, bins=EPS_EDGES)[0]
        if fin.any():
            self.eps_max = max(self.eps_max, float(t.eps[fin].max()))


def envelope(acc: Accumulator, d: Diagnosis) -> None:
    """|Delta| against p with M3's envelope; the head/tail ratio (DVP M3, M7)."""
    b, n, f = acc.bins, acc.bins["n"], acc.folds[NAME]
    nz = n > 0
    q50, q99 = (min(hist_quantile(f.eps_hist, q), f.eps_max) for q in (0.5, 0.99))
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
    d.points["envelope_hist"] = f.hist
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
                     eps_implied_max=f.eps_max)
    lines = [f"mean |Delta| {num(a['sum_abs'] / a['n'])}, max {num(a['max_abs'])} over "
             f"{plural(int(a['n']), 'token')}."]
    if np.isnan(ratio):
        lines.append(f"too few head (p > {acc.head_p:g}: {int(g['head']['n'])}) or tail "
                     f"(p < {acc.tail_p:g}: {int(g['tail']['n'])}) tokens to compare (need "
                     f"{MIN_GROUP} each).")
    else:
        where = ("concentrated in the tail, as DVP's (1-p) law predicts" if ratio >= TAIL_HEAD_RATIO
                 else f"not concentrated in the tail (< {TAIL_HEAD_RATIO:g}x)")
        lines.append(f"tail tokens mismatch {times(ratio, 'more', 'less', 'much')} head tokens "
                     f"(mean |Delta| {num(mean_abs['tail'])} vs {num(mean_abs['head'])}): {where}.")
        e = {k: g[k]["sum_eps"] / g[k]["n_eps"] if g[k]["n_eps"] else math.nan
             for k in ("head", "tail")}
        er = e["tail"] / e["head"] if e["head"] > 0 else math.nan
        if np.isfinite(er):
            verdict = ("the (1-p) factor accounts for the gap" if 1 / EPS_FLAT <= er <= EPS_FLAT
                       else "the logits themselves disagree more in the tail" if er > EPS_FLAT
                       else "the head's logits disagree more")
            lines.append(f"M3: the logit perturbation each token implies in the tail is "
                         f"{times(er)} in the head (mean eps {num(e['tail'])} vs "
                         f"{num(e['head'])}): {verdict}.")
    lines.append(f"M3's envelope at the 99th percentile of the implied eps ({num(q99)}) is drawn; "
                 f"median implied eps {num(q50)}.")
    d.verdicts["envelope"] = lines


def _figure(d: Diagnosis, plt):
    t, h = d.tables["envelope"], d.points["envelope_hist"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    mesh = ax.pcolormesh(10 ** P_EDGES, 10 ** ABS_EDGES, np.where(h.T > 0, h.T, np.nan),
                         norm=LogNorm(vmin=1, vmax=max(h.max(), 1)), cmap="Greys", shading="flat")
    fig.colorbar(mesh, ax=ax, label="tokens")
    ax.plot(t.p_mean, t.mean_abs_delta, "o", color="C0", ms=4, label="mean |Delta| per bin")
    ax.plot(t.p_mean, t.max_abs_delta, "^", color="C3", ms=4, label="max |Delta| per bin")
    grid = np.logspace(P_EDGES[0], 0, 200)
    for key, style in (("eps_implied_q50", ":"), ("eps_implied_q99", "--")):
        e = d.summary.get(key)
        if e is not None and np.isfinite(e):
            ax.plot(grid, mismatch_bound(torch.from_numpy(grid), e, "exact").numpy(), "k" + style,
                    label=f"M3 bound, eps = {e:.3g} ({key[-3:]})")
    ax.set(xscale="log", yscale="log", xlabel="trainer p of the sampled token",
           ylabel="|Delta| = |log pi_roll - log pi_train|",
           title="Token mismatch against p (DVP M3)")
    ax.legend(fontsize=7, loc="lower left")
    return fig, t


def hist_files(d: Diagnosis) -> dict[str, str]:
    """``envelope_hist.csv``: the heat map behind the figure, one row per non-empty cell."""
    if "envelope_hist" not in d.points:
        return {}
    h = d.points["envelope_hist"]
    i, j = np.nonzero(h)
    tbl = pd.DataFrame({"p_lo": 10 ** P_EDGES[i], "p_hi": 10 ** P_EDGES[i + 1],
                        "abs_lo": 10 ** ABS_EDGES[j], "abs_hi": 10 ** ABS_EDGES[j + 1],
                        "tokens": h[i, j].astype(int)})
    return {"envelope_hist.csv": tbl.to_csv(index=False, float_format="%.8g")}


SUMMARY = {
    "tokens": "token rows included (finite log-probs)",
    "k1": "mean over tokens of k1 = -log rho, rho = pi_train / pi_roll (TIM; T12)",
    "k3": "mean over tokens of k3 = rho - 1 - log rho (TIM; T12)",
    "abs_delta_mean": "mean abs(Delta), Delta = log pi_roll - log pi_train (DVP M3)",
    "abs_delta_max": "max abs(Delta)",
    "tail_tokens": "tokens with p < tail_p",
    "head_tokens": "tokens with p > head_p",
    "tail_abs_delta_mean": "mean abs(Delta) of tail tokens (null below MIN_GROUP tokens)",
    "head_abs_delta_mean": "mean abs(Delta) of head tokens (null below MIN_GROUP tokens)",
    "tail_head_ratio": "tail_abs_delta_mean / head_abs_delta_mean (DVP's (1-p) law: > 1)",
    "eps_implied_q50": "median over tokens of the smallest eps M3 needs (implied_eps), to "
                       "0.05 decade",
    "eps_implied_q99": "its 99th percentile (the envelope drawn)",
    "eps_implied_max": "its largest finite value",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "|Delta| against p, with M3's envelope", "M3, M7; DVP's (1-p) law",
                  lambda ctx, d: envelope(ctx.acc, d), EnvelopeSums, _figure, hist_files,
                  summary=SUMMARY)
