"""TRM's acceptance, DVP's pruning, k1/k3 over steps, and the assembly of a :class:`Diagnosis`.

Source: TRM (arXiv 2512.23075; T12), DVP (arXiv 2512.23087; P2, P4), TIM (arXiv 2605.14220;
k1, k3). Thresholds and summary keys: :mod:`tailtheory.diagnose.sections`; the placement on
the dose-response register (V6): :mod:`tailtheory.diagnose.register`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tailtheory.diagnose import sections as sec
from tailtheory.diagnose.aggregate import RHO_GRID, STEP_FIELDS, Accumulator
from tailtheory.diagnose.faults import truncation_note
from tailtheory.diagnose.register import bottom_line, register_section
from tailtheory.diagnose.sections import Diagnosis, _f, plural
from tailtheory.trm.mask import acceptance_prob, trm_mask

LENGTH_BINS = 4
"""Length groups of TRM's length panel: quartiles, or each length when there are at most 4."""


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
    import pandas as pd

    T, max_k2 = s["n_tok"], s["max_k2"]
    mean_k3 = s["sum_k3"] / np.maximum(T, 1)
    q = acc.violations / max(acc.groups["all"]["n"], 1)
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
                 accept_avg_k3=accept(mean_k3, "avg", t).mean()) for t in sec.TRM_GRID]
    pred = {int(t): float(acceptance_prob(q, int(t))) for t in np.unique(T)}
    predicted = np.array([pred[int(t)] for t in T])
    which = sec.group_bins(T, LENGTH_BINS)
    for j in np.unique(which):
        sel = which == j
        rows.append(dict(kind="length", length_lo=T[sel].min(), length_hi=T[sel].max(),
                         responses=int(sel.sum()), accept_max_k2=keep_max[sel].mean(),
                         predicted_iid=predicted[sel].mean()))
    d.tables["trm"] = pd.DataFrame(rows)
    lines = [f"TRM keeps {_f(100 * keep_max.mean(), '.3g')}% of {len(T)} responses with "
             f"max_t k2 <= {delta_max:g}, {_f(100 * keep_avg.mean(), '.3g')}% with mean_t k3 <= "
             f"{delta_avg:g}, {_f(100 * (keep_max & keep_avg).mean(), '.3g')}% with both "
             f"(per-token violation rate q = {_f(q)})."]
    length = d.tables["trm"].query("kind == 'length'")
    if len(T) >= sec.MIN_SEQUENCES and len(length) >= 2:
        lo, hi = length.iloc[0], length.iloc[-1]
        gap = lo.accept_max_k2 - hi.accept_max_k2
        span = lambda r: (f"{int(r.length_lo)}" if r.length_lo == r.length_hi  # noqa: E731
                          else f"{int(r.length_lo)}-{int(r.length_hi)}")
        tok = lambda r: "token" if r.length_lo == r.length_hi == 1 else "tokens"  # noqa: E731
        lines.append(f"the shortest responses ({span(lo)} {tok(lo)}) keep "
                     f"{_f(100 * lo.accept_max_k2, '.3g')}%, the longest ({span(hi)}) "
                     f"{_f(100 * hi.accept_max_k2, '.3g')}%; (1 - q)^T "
                     f"predicts {_f(100 * lo.predicted_iid, '.3g')}% and "
                     f"{_f(100 * hi.predicted_iid, '.3g')}%: "
                     + ("length-biased, as T12 predicts." if gap >= sec.LENGTH_BIAS_GAP else
                        f"no length bias beyond {sec.LENGTH_BIAS_GAP:.0%}."))
    d.verdicts["trm"] = lines


def dvp(acc: Accumulator, d: Diagnosis, s: dict) -> None:
    """P2/P4: what DVP's min-p rule at each rho would prune (only with top-k columns)."""
    import pandas as pd

    dv = acc.dvp
    if acc.dvp_side is None or dv["n"].sum() == 0:
        d.summary["dvp"] = d.summary["topk_k"] = None
        d.verdicts["dvp"] = ["needs the top-k log-probs (columns topk_logp_rollout or "
                             "topk_logp_train, docs/diagnose.md): with sampled-token log-probs "
                             "only, DVP's kept set is unknown."]
        return
    r_max = acc.r_max if acc.r_max else 1.0
    n = dv["n"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tbl = pd.DataFrame({
            "rho": acc.rhos, "tokens": n.astype(int), "pruned_token_frac": dv["pruned"] / n,
            "abs_delta_share": dv["abs_pruned"] / dv["abs_all"],
            "mean_pruned_mass": dv["mass"] / n, "max_pruned_mass": dv["mass_max"],
            "exact_frac": dv["exact"] / n,
            "p2_bias_bound_mean": r_max * s["mass"].mean(0) if len(s["mass"]) else math.nan,
            "p2_bias_bound_max": r_max * s["mass"].max(0) if len(s["mass"]) else math.nan})
        if dv["mass_train"].any():
            tbl["mean_pruned_mass_train"] = dv["mass_train"] / n
    d.tables["dvp"] = tbl
    d.summary["dvp"] = tbl.drop(columns=["tokens"]).to_dict("records")
    k_min, k_max = acc.topk_len
    d.summary["topk_k"] = [int(k_min), int(k_max)]
    lo, hi = tbl.exact_frac.min(), tbl.exact_frac.max()
    k = f"top-{k_max}" if k_min == k_max else f"top-{k_min} to top-{k_max}"
    lines = [f"DVP's min-p set from the {acc.dvp_side}'s {k} lists "
             f"({plural(int(n[0]), 'token')}): "
             + ("the pruned mass is exact at every position." if lo == 1 else
                "the lists stop before every cut-off, so the pruned mass is only an upper "
                "bound (longer lists make it exact)." if hi == 0 else
                f"the pruned mass is exact where the list reaches the cut-off, at "
                f"{_f(100 * lo, '.3g')}% to {_f(100 * hi, '.3g')}% of positions depending on "
                f"rho, and an upper bound at the rest.")]
    for _, r in tbl.iterrows():
        conc = r.abs_delta_share / r.pruned_token_frac if r.pruned_token_frac > 0 else math.nan
        what = ("prunes no sampled token" if r.pruned_token_frac == 0 else
                f"prunes {_f(100 * r.pruned_token_frac, '.2g')}% of sampled tokens carrying "
                f"{_f(100 * r.abs_delta_share, '.2g')}% of |Delta| ("
                + (f"{_f(conc, '.2g')}x their share: targets the mismatch)"
                   if conc >= sec.PRUNE_CONCENTRATION else
                   f"{_f(conc, '.2g')}x their share: below {sec.PRUNE_CONCENTRATION:g}x, "
                   f"no knee (P4))"))
        note = truncation_note(r.exact_frac, int(k_max), int(k_min))
        lines.append(f"rho = {r.rho:g}: {what}; mean pruned mass {_f(r.mean_pruned_mass)}"
                     + (f" ({note})" if note else "")
                     + f", P2 bias bound R_max sum_t m = {_f(r.p2_bias_bound_mean)} per response "
                     f"on average (R_max = {r_max:g}).")
    d.verdicts["dvp"] = lines


def steps(acc: Accumulator, d: Diagnosis) -> None:
    """k1, k3 and |Delta| per step (TIM's monitors; V5: they can stay flat while reward falls)."""
    import pandas as pd

    keys = sorted(acc.steps)
    arr = np.array([acc.steps[k] for k in keys]).reshape(len(keys), len(STEP_FIELDS))
    n = arr[:, 0]
    d.tables["steps"] = pd.DataFrame({"step": keys, "tokens": n.astype(int),
                                      "k1": arr[:, 1] / n, "k3": arr[:, 2] / n,
                                      "abs_delta_mean": arr[:, 3] / n, "abs_delta_max": arr[:, 4]})
    d.summary["steps"] = len(keys)
    if len(keys) < 3:
        d.verdicts["steps"] = [f"{len(keys)} step(s): no trend to read (need 3)."]
        return
    k3 = d.tables["steps"]["k3"].to_numpy()
    third = len(k3) // 3
    first, last = k3[:third].mean(), k3[-third:].mean()
    growth = last / first if first > 0 else math.nan
    trend = ("the mismatch grows over training" if growth >= sec.STEP_GROWTH else
             "the mismatch shrinks over training" if growth <= 1 / sec.STEP_GROWTH else
             f"no trend beyond {sec.STEP_GROWTH:g}x")
    d.verdicts["steps"] = [f"mean k3 {_f(first)} over the first third of {len(keys)} steps, "
                           f"{_f(last)} over the last ({_f(growth, '.2g')}x): {trend}."]


def ratios(acc: Accumulator, d: Diagnosis, s: dict) -> None:
    """The raw importance ratios ``rho = exp(logp_train - logp_rollout)`` against the caps of
    the engine's corrections (TIM V4: TIS, IcePop, MIS), k3 with its per-token clamp beside
    mean ``|Delta|``, and the tail curve of ``rho`` (the section's figure and CSV)."""
    import pandas as pd

    r, c = acc.ratios, acc.caps
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
    d.tables["ratios"] = pd.DataFrame({"c": RHO_GRID, "frac_rho_above_c": acc.rho_above / n,
                                       "frac_rho_below_1_over_c": acc.rho_below / n})
    sm = d.summary
    pct = lambda x: f"{_f(100 * x, '.3g')}%"  # noqa: E731
    lines = [f"rho = pi_train / pi_roll over {plural(int(r['n']), 'token')}: mean "
             f"{_f(sm['rho_mean'], '.4g')}, range {_f(sm['rho_min'])} to {_f(sm['rho_max'])}.",
             f"token TIS (cap {c['tis_cap']:g}) truncates {pct(sm['tis_truncated_frac'])} of "
             f"tokens; IcePop's band [{c['band_low']:g}, {c['band_high']:g}] masks "
             f"{pct(sm['band_masked_frac'])}.",
             f"on complete responses ({len(T)}): prod_t rho_t above the sequence TIS cap "
             f"{c['seq_tis_cap']:g} in {pct(seq_tis)}, outside MIS's band [{c['mis_low']:g}, "
             f"{c['mis_high']:g}] in {pct(seq_out)}.",
             f"mean k3 {_f(sm['k3'])}; clamped to the band, {_f(sm['k3_clamped'])}; tokens "
             f"outside the band carry {pct(sm['k3_outside_share'])} of the summed k3; mean "
             f"|Delta| {_f(sm['abs_delta_mean'])}."]
    d.verdicts["ratios"] = lines


def faults_section(acc: Accumulator, d: Diagnosis) -> None:
    """Run the fault checks (:mod:`tailtheory.diagnose.faults`): an error raises
    ``ValueError``; warnings go first in the report and into ``summary.json``'s ``faults``."""
    found = acc.faults.faults(acc.bins)
    d.summary["faults"] = [f.as_dict() for f in found]
    d.points["faults"] = found
    d.verdicts["faults"] = ([f"{f.name}: {f.message}." for f in found] or
                            ["none found (log-probs <= 0, not probabilities, no off-by-one shift, "
                             "one temperature on both sides)."])


def diagnosis(acc: Accumulator, delta_max: float, delta_avg: float,
              register: list[dict] | None = None) -> Diagnosis:
    """Every section from the sums of a finished :class:`Accumulator`: the fault checks first,
    the run placed on the dose-response register and the bottom line last (``register``: rows
    of ``tailtheory.tim.dose.register_table``; ``None`` reads the stored one). Raises
    ``ValueError`` when no row was included or a fault is an error."""
    acc.check_complete()
    if acc.groups["all"]["n"] == 0:
        raise ValueError(f"no row with finite log-probs in {len(acc.files)} dump(s) "
                         f"({acc.excluded_rows} excluded)")
    s = sec.complete(acc)
    d = Diagnosis(summary=dict(files=len(acc.files), sequences=len(s["n_tok"]),
                               excluded_rows=acc.excluded_rows,
                               excluded_by_column=dict(acc.excluded_by_column),
                               excluded_sequences=int((acc.seq["excluded"][:acc.n_seq] > 0).sum()),
                               tail_p=acc.tail_p, head_p=acc.head_p))
    faults_section(acc, d)
    sec.envelope(acc, d)
    sec.bias(acc, d)
    sec.accumulation(acc, d, s)
    trm(acc, d, s, delta_max, delta_avg)
    dvp(acc, d, s)
    steps(acc, d)
    ratios(acc, d, s)
    register_section(d, register)
    bottom_line(d)
    d.summary = {k: d.summary.get(k) for k in sec.SUMMARY_KEYS}
    return d
