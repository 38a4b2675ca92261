"""The raw importance ratios against the caps of the engine's corrections (TIM V4: TIS,
IcePop, MIS).

Source: TIM (arXiv 2605.14220; V4); the caps are ``tailtheory.engine.types.MethodParams``'
(:func:`~tailtheory.diagnose.aggregate.ratio_caps`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tailtheory.diagnose.aggregate import (RATIO_FIELDS, RHO_GRID, Accumulator, clamped_k3,
                                            ratio_caps)
from tailtheory.diagnose.sections.base import Diagnosis, Section, num, plural


NAME = "ratios"


class RatioSums:
    """The importance ratios ``rho = exp(log_rho)`` against the corrections' caps
    (:data:`RATIO_FIELDS`), and the counts of tokens with ``rho > c`` and ``rho < 1 / c`` over
    :data:`RHO_GRID`."""

    def __init__(self, acc):
        self.caps = ratio_caps()
        self.ratios = dict.fromkeys(RATIO_FIELDS, 0.0)
        self.ratios.update(max_log_rho=-math.inf, min_log_rho=math.inf)
        self.rho_above, self.rho_below = np.zeros(len(RHO_GRID)), np.zeros(len(RHO_GRID))

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        log_rho, kk3 = t.log_rho, t.kk3
        c, r = self.caps, self.ratios
        out = (log_rho < math.log(c["band_low"])) | (log_rho > math.log(c["band_high"]))
        r["n"] += len(log_rho)
        r["sum_rho"] += float(np.exp(log_rho).sum())
        r["tis_truncated"] += int((log_rho > math.log(c["tis_cap"])).sum())
        r["band_masked"] += int(out.sum())
        r["sum_k3_clamped"] += float(clamped_k3(log_rho, c["band_low"], c["band_high"]).sum())
        r["sum_k3_outside"] += float(kk3[out].sum())
        if len(log_rho):
            r["max_log_rho"] = max(r["max_log_rho"], float(log_rho.max()))
            r["min_log_rho"] = min(r["min_log_rho"], float(log_rho.min()))
        lg, srt = np.log(RHO_GRID), np.sort(log_rho)
        self.rho_above += len(srt) - np.searchsorted(srt, lg, side="right")
        self.rho_below += np.searchsorted(srt, -lg, side="left")


def ratios(acc: Accumulator, d: Diagnosis, s: dict) -> None:
    """The raw importance ratios ``rho = exp(logp_train - logp_rollout)`` against the caps of
    the engine's corrections (TIM V4: TIS, IcePop, MIS), k3 with its per-token clamp beside
    mean ``|Delta|``, and the tail curve of ``rho`` (the section's figure and CSV)."""
    f = acc.folds[NAME]
    r, c = f.ratios, f.caps
    n = max(r["n"], 1)
    T = s["log_ratio"]
    seq_out = ((T < math.log(c["mis_low"])) | (T > math.log(c["mis_high"]))).mean() \
        if len(T) else math.nan
    seq_tis = (T > math.log(c["seq_tis_cap"])).mean() if len(T) else math.nan
    k3_all = acc.sum_k3
    d.summary.update(
        rho_mean=r["sum_rho"] / n, rho_min=math.exp(r["min_log_rho"]),
        rho_max=math.exp(min(r["max_log_rho"], 700.0)), ratio_caps=dict(c),
        tis_truncated_frac=r["tis_truncated"] / n, band_masked_frac=r["band_masked"] / n,
        seq_tis_truncated_frac=seq_tis, seq_masked_frac=seq_out,
        k3_clamped=r["sum_k3_clamped"] / n,
        k3_outside_share=r["sum_k3_outside"] / k3_all if k3_all > 0 else math.nan)
    d.tables["ratios"] = pd.DataFrame({"c": RHO_GRID, "frac_rho_above_c": f.rho_above / n,
                                       "frac_rho_below_1_over_c": f.rho_below / n})
    sm = d.summary
    pct = lambda x: f"{num(100 * x, '.3g')}%"  # noqa: E731
    lines = [f"rho = pi_train / pi_roll over {plural(int(r['n']), 'token')}: mean "
             f"{num(sm['rho_mean'], '.4g')}, range {num(sm['rho_min'])} to {num(sm['rho_max'])}.",
             f"token TIS (cap {c['tis_cap']:g}) truncates {pct(sm['tis_truncated_frac'])} of "
             f"tokens; IcePop's band [{c['band_low']:g}, {c['band_high']:g}] masks "
             f"{pct(sm['band_masked_frac'])}.",
             f"on complete responses ({len(T)}): prod_t rho_t above the sequence TIS cap "
             f"{c['seq_tis_cap']:g} in {pct(seq_tis)}, outside MIS's band [{c['mis_low']:g}, "
             f"{c['mis_high']:g}] in {pct(seq_out)}.",
             f"mean k3 {num(sm['k3'])}; clamped to the band, {num(sm['k3_clamped'])}; tokens "
             f"outside the band carry {pct(sm['k3_outside_share'])} of the summed k3; mean "
             f"|Delta| {num(sm['abs_delta_mean'])}."]
    d.verdicts["ratios"] = lines


def _figure(d: Diagnosis, plt):
    t, c = d.tables["ratios"], d.summary["ratio_caps"]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    a.plot(t.c, t.frac_rho_above_c, "o-", ms=3, label="rho > c")
    a.plot(t.c, t.frac_rho_below_1_over_c, "s-", ms=3, label="rho < 1/c")
    a.axvline(c["tis_cap"], color="C3", ls=":", lw=1, label=f"TIS cap {c['tis_cap']:g}")
    a.axvline(1 / c["band_low"], color="C2", ls="--", lw=1,
              label=f"band [{c['band_low']:g}, {c['band_high']:g}]")
    a.set(xscale="log", xlabel="c", ylabel="fraction of tokens",
          title="Raw importance ratios rho = pi_train / pi_roll")
    a.set_yscale("symlog", linthresh=1e-6)
    a.set_ylim(bottom=0)
    a.legend(fontsize=7)
    return fig, t


SUMMARY = {
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
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Importance ratios against the corrections' caps",
                  "TIM's corrections (V4)", lambda ctx, d: ratios(ctx.acc, d, ctx.complete),
                  RatioSums, _figure, summary=SUMMARY)
