"""Why a response's sequence ratio is far from 1: its log-ratio split into the mean per-token
log-ratio times its length, and the responses each correction would truncate or mask.

Source: DVP (arXiv 2512.23087; M6): a sequence's log-ratio is a sum over its tokens,
``sum_t log rho_t = (mean_t log rho_t) * T``, exactly, so a mean per-token log-ratio of 0.012
over about 100 tokens gives a sequence ratio near ``exp(1.2)`` (TRL issue 4772), and one of
-0.0005 over 1,000 tokens a ratio near 0.6 however closely each token's two log-probs agree
(TRL issue 5814's ratios of 0.4-0.7). TIM (arXiv 2605.14220; V4) for the corrections: the engine's
registered methods ``tis``, ``icepop``, ``seq_tis`` and ``mis``
(:mod:`tailtheory.engine.registry`) at their defaults, the fields of
:class:`~tailtheory.engine.types.MethodParams` (:data:`METHODS`).

Per complete response: its length ``T``, ``m = mean_t log rho_t`` and ``sum_t log rho_t``;
whether token TIS truncates one of its tokens (``rho_t > tis_cap``), IcePop masks one
(``rho_t`` outside ``[icepop_low, icepop_high]``), sequence TIS truncates it
(``prod_t rho_t > seq_tis_cap``), MIS masks it (``prod_t rho_t`` outside
``[mis_low, mis_high]``). For the responses MIS masks, the exact split
``log|sum_t log rho_t| = log T + log|m|`` averaged over them against all responses gives the
factor their length and the factor their per-token size contribute (:func:`length_or_size`).

Shapes: per complete response ``(S,)``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tailtheory.diagnose.sections.base import Diagnosis, Section, grown, num, plural
from tailtheory.engine.registry import get_method
from tailtheory.engine.types import MethodParams

NAME = "seq_ratio"

METHODS = (("tis", "token", "truncates", ("tis_cap",)),
           ("icepop", "token", "masks", ("icepop_low", "icepop_high")),
           ("seq_tis", "sequence", "truncates", ("seq_tis_cap",)),
           ("mis", "sequence", "masks", ("mis_low", "mis_high")))
"""The corrections, by their names in the engine's registry: level, what they do to a response
beyond their caps, and the :class:`~tailtheory.engine.types.MethodParams` fields of their caps."""
LARGEST = 5
"""Responses of largest ``|sum_t log rho_t|`` named in ``summary.json`` (the first in words)."""


def method_defaults() -> list[dict]:
    """Each method of :data:`METHODS` with its registered source (``get_method``) and its caps
    at the engine's defaults: ``method``, ``level``, ``acts``, ``source``, ``params``."""
    hp = MethodParams()
    return [{"method": name, "level": level, "acts": acts, "source": get_method(name).source,
             "params": {f: getattr(hp, f) for f in fields}}
            for name, level, acts, fields in METHODS]


def acted_on(m: dict, log_ratio, max_log_rho, min_log_rho) -> np.ndarray:
    """Which responses method ``m`` (a row of :func:`method_defaults`) truncates or masks, from
    their ``sum_t log rho_t`` and their largest and smallest ``log rho_t``. Shapes: (S,) -> (S,)
    bool."""
    p = m["params"]
    if m["method"] == "tis":
        return max_log_rho > math.log(p["tis_cap"])
    if m["method"] == "icepop":
        return (max_log_rho > math.log(p["icepop_high"])) | \
            (min_log_rho < math.log(p["icepop_low"]))
    if m["method"] == "seq_tis":
        return log_ratio > math.log(p["seq_tis_cap"])
    return (log_ratio < math.log(p["mis_low"])) | (log_ratio > math.log(p["mis_high"]))


def break_even(mean_log_rho: float, methods: list[dict]) -> dict:
    """The length at which a response at ``mean_log_rho`` per token reaches sequence TIS's cap
    and leaves MIS's band (``log edge / mean_log_rho``); ``None`` where it never does (a ratio
    below 1 is never truncated; a mean of 0 stays at 1)."""
    p = {k: v for m in methods for k, v in m["params"].items()}
    x = mean_log_rho
    if not (math.isfinite(x) and x != 0):
        return {"seq_tis": None, "mis": None}
    return {"seq_tis": math.log(p["seq_tis_cap"]) / x if x > 0 else None,
            "mis": (math.log(p["mis_high"]) if x > 0 else math.log(p["mis_low"])) / x}


def length_or_size(T, mean, out) -> dict:
    """The exact split of ``log|sum_t log rho_t| = log T + log|mean|`` for the responses
    ``out`` against all: the geometric-mean factor of ``|sum_t log rho_t|`` (``factor``), of
    the length (``length``) and of the per-token size (``size``), ``length * size == factor``
    (responses with a mean of 0 left out). Shapes: (S,) each."""
    ok = mean != 0
    if not (out & ok).any():
        return {"responses": int(out.sum()), "factor": None, "length": None, "size": None}
    lt, lm = np.log(T[ok]), np.log(np.abs(mean[ok]))
    o = out[ok]
    length, size = math.exp(lt[o].mean() - lt.mean()), math.exp(lm[o].mean() - lm.mean())
    return {"responses": int(out.sum()), "factor": length * size, "length": length,
            "size": size}


class SeqRatioSums:
    """Per response: the largest and smallest ``log rho_t`` (token TIS and IcePop act on a
    response through them)."""

    def __init__(self, acc):
        self.acc = acc
        self.arrays = {"max": np.zeros(0), "min": np.zeros(0)}

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        grown(self.arrays, self.acc.n_seq, {"max": -np.inf, "min": np.inf})
        np.maximum.at(self.arrays["max"], t.idx, t.log_rho)
        np.minimum.at(self.arrays["min"], t.idx, t.log_rho)


def seq_ratio(acc, d: Diagnosis, s: dict) -> None:
    """The split of each complete response's log-ratio and the responses each correction acts
    on: ``d.summary["seq_ratio"]``, the table ``seq_ratio`` (one row per response), the lines."""
    f, idx = acc.folds[NAME].arrays, s["index"]
    T, S = s["n_tok"], s["log_ratio"]
    m = S / np.maximum(T, 1)
    methods = method_defaults()
    mx, mn = (f["max"][idx], f["min"][idx]) if len(idx) else (np.zeros(0), np.zeros(0))
    hit = {x["method"]: acted_on(x, S, mx, mn) for x in methods}
    for x in methods:
        x.update(responses=int(hit[x["method"]].sum()),
                 share=float(hit[x["method"]].mean()) if len(T) else None)
    mbar = float(S.sum() / T.sum()) if len(T) else math.nan
    order = np.argsort(-np.abs(S), kind="stable")[:LARGEST]
    sids = [acc.sample_ids[i] for i in idx]
    largest = [{"step": int(s["step"][i]), "sample_id": sids[i], "tokens": int(T[i]),
                "mean_log_rho": float(m[i]), "log_ratio": float(S[i])} for i in order]
    d.summary[NAME] = {"responses": len(T), "mean_log_rho": mbar,
                       "length_median": float(np.median(T)) if len(T) else None,
                       "methods": methods, "break_even_length": break_even(mbar, methods),
                       "outside_mis": length_or_size(T, m, hit["mis"]), "largest": largest}
    d.tables[NAME] = pd.DataFrame({
        "file": [str(acc.files[int(i)]) for i in s["file"]], "step": s["step"].astype(int),
        "sample_id": sids, "tokens": T.astype(int), "mean_log_rho": m, "log_ratio": S,
        "ratio": np.exp(np.minimum(S, 700.0)),
        **{f"{k}_{dict((x['method'], x['acts']) for x in methods)[k]}": v
           for k, v in hit.items()}})
    d.verdicts[NAME] = seq_ratio_lines(d.summary[NAME])


def seq_ratio_lines(r: dict) -> list[str]:
    """The section's summary in words."""
    if not r["responses"]:
        return ["no complete response: the sequence ratios cannot be split."]
    lines = [f"each response's sum_t log rho = (mean_t log rho) x length, exactly: over "
             f"{plural(r['responses'], 'complete response')}, the mean per-token log-ratio is "
             f"{num(r['mean_log_rho'])} (token-weighted), the median length "
             f"{num(r['length_median'], '.4g')}."]
    if r["largest"]:
        w = r["largest"][0]
        lines.append(f"largest |sum_t log rho|: step {w['step']}, sample {w['sample_id']}: "
                     f"{num(w['log_ratio'])} = {num(w['mean_log_rho'])} per token x "
                     f"{w['tokens']} tokens (sequence ratio "
                     f"{num(math.exp(min(w['log_ratio'], 700.0)))}).")
    pct = lambda x: f"{num(100 * x, '.3g')}%"  # noqa: E731
    acts = "; ".join(f"{x['method']} ({', '.join(f'{k} {v:g}' for k, v in x['params'].items())})"
                     f" {x['acts']} {pct(x['share'])}" for x in r["methods"])
    lines.append(f"responses acted on at the engine's defaults (MethodParams): {acts}.")
    be = r["break_even_length"]
    if be["mis"] is not None:
        lines.append(f"at {num(r['mean_log_rho'])} per token, a response leaves MIS's band after "
                     f"about {num(be['mis'], '.3g')} tokens"
                     + (f" and passes sequence TIS's cap after {num(be['seq_tis'], '.3g')}"
                        if be["seq_tis"] is not None else "") + ".")
    o = r["outside_mis"]
    if o["factor"] is not None:
        why = "by length" if o["length"] >= o["size"] else "by per-token size"
        lines.append(f"responses MIS masks ({o['responses']}): their |sum_t log rho| is "
                     f"{num(o['factor'], '.3g')}x the run's (geometric means), "
                     f"{num(o['length'], '.3g')}x from length and {num(o['size'], '.3g')}x "
                     f"from the per-token log-ratio: they leave the band {why}"
                     + (" (TRL issues 4772 and 5814: a small per-token log-ratio over many "
                        "tokens)"
                        if why == "by length" else "") + ".")
    return lines


def _figure(d: Diagnosis, plt):
    t, r = d.tables[NAME], d.summary[NAME]
    t = t[t.mean_log_rho != 0]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    out = t.mis_masks.to_numpy(bool)
    a.plot(t.tokens[~out], t.mean_log_rho.abs()[~out], ".", ms=3, alpha=0.4, label="kept by MIS")
    a.plot(t.tokens[out], t.mean_log_rho.abs()[out], ".", ms=4, color="C3", label="masked by MIS")
    p = {k: v for m in r["methods"] for k, v in m["params"].items()}
    L = np.geomspace(max(1, t.tokens.min()), max(2, t.tokens.max()), 50)
    for edge in sorted({abs(math.log(p["mis_low"])), math.log(p["mis_high"])}):
        a.plot(L, edge / L, "k:", lw=1)
    a.set(xscale="log", yscale="log", xlabel="response length T",
          ylabel="|mean_t log rho_t|",
          title="|sum_t log rho| = |mean| x T: dotted, MIS's band edge")
    a.legend(fontsize=7)
    return fig, d.tables[NAME]


SUMMARY = {
    "seq_ratio": "each complete response's sum_t log rho split exactly into mean_t log rho x "
                 "length: responses, mean_log_rho (token-weighted), length_median, methods "
                 "(the engine's registered tis, icepop, seq_tis, mis: level, acts, source, "
                 "params at their MethodParams defaults, responses they truncate or mask and "
                 "share), break_even_length (the length at which a response at mean_log_rho "
                 "per token passes seq_tis_cap and leaves MIS's band), outside_mis (the "
                 "responses MIS masks: factor, their geometric-mean |sum_t log rho| against "
                 "all responses', split into length x size) and largest (responses of largest "
                 "|sum_t log rho|: step, sample_id, tokens, mean_log_rho, log_ratio)",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Sequence ratios: mean per-token log-ratio x length",
                  "M6; TIM's corrections (V4)",
                  lambda ctx, d: seq_ratio(ctx.acc, d, ctx.complete), SeqRatioSums, _figure,
                  summary=SUMMARY)
