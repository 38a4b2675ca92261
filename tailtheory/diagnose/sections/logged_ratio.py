"""The framework's own logged importance ratio against the log-probs: which aggregation of
``log rho_t = logp_train - logp_rollout`` it is (the sum, the mean, per token) and its sign.

Source: TIM (arXiv 2605.14220; V4): sequence TIS and MIS correct with the sequence's importance
ratio ``prod_t rho_t = exp(sum_t log rho_t)`` (DVP's M6: a sum over tokens), token TIS and
IcePop with ``rho_t``. TRL issue 5814 read the ratios of 0.4-0.7 of a summing sequence mode,
with matching per-token log-probs, as a fault and asked for the mean (its PR 5815):
``exp(mean_t log rho_t)`` is the geometric mean of the token ratios, not the sequence's ratio.
A ratio logged as ``pi_roll / pi_train`` has its sign flipped.

The formats that log a ratio are those whose reader names one
(:attr:`~tailtheory.diagnose.formats.registry.Reader.ratio`): this engine's ``weight`` (the
product of its corrections' token weights), prime-rl's ``importance_ratio`` (in exports that
hold it) and the generic ``logged_ratio`` column; NeMo-RL's and slime's dumps log none.

Per complete response with a logged ratio, the candidates (:data:`CANDIDATES`) it matches
within :data:`RATIO_TOL` in log space: ``sum`` / ``mean`` (a ratio constant over the response,
against ``exp`` of the sum / mean of its ``log rho_t``), ``token`` (each token's ratio against
``rho_t``), and each with its sign flipped (``-sum``, ``-mean``, ``-token``). A response matching
one candidate counts for it; several, ``ambiguous`` (one token, or ``log rho`` near 0); none,
``unexplained`` (a ratio truncated at a cap, another quantity); a response whose every logged
ratio is 0, ``masked``. The aggregation is the candidate most responses match
(:func:`aggregation_verdict`); :func:`aggregation_check` runs the same on ``(B, T)`` arrays.

Shapes: a batch of ``n`` token rows, ``(n,)``; per response ``(S,)``; arrays ``(B, T)``.
"""

from __future__ import annotations

import math

import numpy as np

from tailtheory.diagnose.formats import readers
from tailtheory.diagnose.sections.base import Diagnosis, Section, grown, num, plural

NAME = "logged_ratio"

RATIO_TOL = 5e-3
"""Largest ``|log logged - candidate|`` of a match: a ratio stored in bf16 rounds by at most
``2^-9`` (2e-3) relative, float32 sums over thousands of tokens by less than 1e-4."""
CANDIDATES = ("sum", "mean", "token", "-sum", "-mean", "-token")
"""What a logged ratio may be: ``exp`` of the sum or the mean of ``log rho_t`` over its
response, ``rho_t`` itself, or each with its sign flipped."""
FAULTS = {"sum": "", "token": "", "mean": "mean_not_sum", "-sum": "sign_flipped",
          "-mean": "sign_flipped", "-token": "sign_flipped"}
"""The fault of each aggregation (``""``: the ratio the corrections define)."""
FIELDS = ("n_logged", "n_zero", "n_one", "n_match", "n_flip", "lw_min", "lw_max")
"""Per-response sums: tokens with a positive logged ratio, with 0, with exactly 1, whose
``log logged`` matches ``log rho_t`` / ``-log rho_t``, and the smallest and largest
``log logged``."""
FILLS = {"lw_min": np.inf, "lw_max": -np.inf}


def carriers() -> list[str]:
    """The formats that log a ratio, as ``name (column)``, from the readers' table."""
    return [f"{r.name} ({r.ratio})" for r in readers() if r.ratio]


def token_sums(log_rho, ratio, idx, n: int, tol: float = RATIO_TOL) -> dict[str, np.ndarray]:
    """Per response (``idx``: each token's response, ``n`` responses) the sums of
    :data:`FIELDS` over tokens whose logged ``ratio`` is finite (NaN: not logged; a negative
    one counts as logged and matches nothing). Shapes: (n_tok,) -> (n,) each."""
    fin = np.isfinite(ratio)
    pos = fin & (ratio > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lw = np.where(pos, np.log(np.where(pos, ratio, 1.0)), np.nan)
    neg = fin & (ratio < 0)
    lw = np.where(neg, np.inf, lw)                            # logged, matches nothing
    ok = pos | neg
    cnt = lambda w: np.bincount(idx, weights=w.astype(float), minlength=n)  # noqa: E731
    with np.errstate(invalid="ignore"):
        match, flip = np.abs(lw - log_rho) <= tol, np.abs(lw + log_rho) <= tol
    out = {"n_logged": cnt(ok), "n_zero": cnt(fin & (ratio == 0)), "n_one": cnt(pos & (lw == 0)),
           "n_match": cnt(ok & match), "n_flip": cnt(ok & flip),
           "lw_min": np.full(n, np.inf), "lw_max": np.full(n, -np.inf)}
    np.minimum.at(out["lw_min"], idx[ok], lw[ok])
    np.maximum.at(out["lw_max"], idx[ok], lw[ok])
    return out


def response_labels(S, T, st: dict, tol: float = RATIO_TOL) -> np.ndarray:
    """Each response's label: a candidate of :data:`CANDIDATES`, ``ambiguous``,
    ``unexplained``, ``masked`` or ``absent`` (no logged ratio), from its ``sum_t log rho_t``
    ``S``, its tokens ``T`` and its sums ``st`` (:func:`token_sums`). Shapes: (S,) -> (S,)."""
    nl = st["n_logged"]
    with np.errstate(invalid="ignore"):
        const = (st["lw_max"] - st["lw_min"] <= tol) & (st["n_zero"] == 0) & (nl == T)
        lw = np.where(const, (st["lw_max"] + st["lw_min"]) / 2, np.nan)
        M = S / np.maximum(T, 1)
        hits = {"sum": const & (np.abs(lw - S) <= tol), "mean": const & (np.abs(lw - M) <= tol),
                "token": (nl > 0) & (st["n_match"] == nl),
                "-sum": const & (np.abs(lw + S) <= tol), "-mean": const & (np.abs(lw + M) <= tol),
                "-token": (nl > 0) & (st["n_flip"] == nl)}
    count = sum(h.astype(int) for h in hits.values())
    out = np.full(len(S), "unexplained", dtype=object)
    for c in CANDIDATES:
        out[hits[c] & (count == 1)] = c
    out[count > 1] = "ambiguous"
    out[(nl == 0) & (st["n_zero"] > 0)] = "masked"
    out[(nl == 0) & (st["n_zero"] == 0)] = "absent"
    return out


def aggregation_verdict(labels, ones: bool = False) -> dict:
    """The aggregation most responses match and its fault (:data:`FAULTS`; ``unexplained``
    when responses were compared and none matched), from :func:`response_labels`; ``ones``:
    every logged ratio is exactly 1 (no correction applied), then no aggregation is read."""
    labels = np.asarray(labels, dtype=object)
    counts = {c: int((labels == c).sum()) for c in (*CANDIDATES, "ambiguous", "unexplained",
                                                    "masked")}
    compared = int(sum(counts.values()) - counts["masked"])
    best = max(CANDIDATES, key=lambda c: counts[c])
    agg, fault = None, ""
    if ones:
        fault = ""
    elif counts[best] > 0:
        agg, fault = best, FAULTS[best]
    elif counts["unexplained"] > 0:
        fault = "unexplained"
    return {"present": True, "ones": bool(ones), "compared": compared, "counts": counts,
            "aggregation": agg, "fault": fault}


def aggregation_check(log_rho, ratio, mask, tol: float = RATIO_TOL) -> dict:
    """:func:`aggregation_verdict` of a logged ``ratio`` against ``log_rho = logp_train -
    logp_rollout`` on whole arrays (``mask``: the response tokens). Shapes: (B, T) each."""
    log_rho, ratio = np.asarray(log_rho, np.float64), np.asarray(ratio, np.float64)
    mask = np.asarray(mask, bool)
    if not (log_rho.shape == ratio.shape == mask.shape and log_rho.ndim == 2):
        raise ValueError(f"log_rho, ratio and mask must share one (B, T) shape; got "
                         f"{log_rho.shape}, {ratio.shape}, {mask.shape}")
    B = log_rho.shape[0]
    idx = np.nonzero(mask)[0]
    st = token_sums(log_rho[mask], ratio[mask], idx, B, tol)
    T, S = mask.sum(1), np.where(mask, log_rho, 0.0).sum(1)
    labels = response_labels(S, T, st, tol)[T > 0]
    return aggregation_verdict(labels, ones=_ones(st))


def _ones(st: dict) -> bool:
    return st["n_logged"].sum() > 0 and st["n_one"].sum() == st["n_logged"].sum() \
        and st["n_zero"].sum() == 0


class LoggedRatioSums:
    """Per response, the sums of :data:`FIELDS` (:func:`token_sums`); the files that log a
    ratio."""

    def __init__(self, acc):
        self.acc = acc
        self.arrays = {k: np.full(0, FILLS.get(k, 0.0)) for k in FIELDS}
        self.files: set[int] = set()

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        b = t.batch
        if b.logged_ratio is None:
            return
        self.files.add(b.file)
        n = self.acc.n_seq
        grown(self.arrays, n, FILLS)
        st = token_sums(t.log_rho, b.logged_ratio[b.ok], t.idx, n)
        for k, v in st.items():
            a = self.arrays[k]
            a[:n] = np.minimum(a[:n], v) if k == "lw_min" else np.maximum(a[:n], v) \
                if k == "lw_max" else a[:n] + v


def logged_ratio(acc, d: Diagnosis, s: dict) -> dict:
    """The check of the dump's logged ratio on its complete responses:
    ``d.summary["logged_ratio"]`` and the verdict lines."""
    f = acc.folds[NAME]
    if not f.files:
        r = {"present": False, "ones": False, "compared": 0, "counts": {}, "aggregation": None,
             "fault": "", "carriers": carriers(), "files": 0, "example": None}
        d.summary[NAME], d.verdicts[NAME] = r, logged_lines(r)
        return r
    idx = s["index"]
    st = {k: v[idx] for k, v in f.arrays.items()}
    S, T = s["log_ratio"], s["n_tok"]
    labels = response_labels(S, T, st)
    r = aggregation_verdict(labels[labels != "absent"], ones=_ones(st))
    r.update(carriers=carriers(), files=len(f.files), example=None)
    if r["aggregation"] in ("sum", "mean", "-sum", "-mean"):
        which = np.flatnonzero(labels == r["aggregation"])
        i = int(which[np.argmax(np.abs(S[which]))])             # the longest lever: largest sum
        r["example"] = {"step": int(s["step"][i]), "sample_id": acc.sample_ids[idx[i]],
                        "tokens": int(T[i]), "logged": math.exp((st["lw_min"][i]
                                                                + st["lw_max"][i]) / 2),
                        "prod_rho": math.exp(min(S[i], 700.0)),
                        "exp_mean": math.exp(S[i] / T[i])}
    d.summary[NAME], d.verdicts[NAME] = r, logged_lines(r)
    return r


def logged_lines(r: dict) -> list[str]:
    """The check in words, TRL issue 5814 named where it applies."""
    where = ", ".join(r["carriers"])
    if not r["present"]:
        return [f"no logged importance ratio in this dump (formats that log one: {where}): "
                f"its aggregation cannot be checked."]
    c, agg = r.get("counts", {}), r["aggregation"]
    if r["ones"]:
        return ["the logged ratio is 1 on every token: no ratio correction was applied, so "
                "there is no aggregation to check."]
    if agg is None:
        return [f"the logged ratio matches no aggregation of log rho = logp_train - "
                f"logp_rollout (sum, mean, per token, either sign) on any of "
                f"{plural(r['compared'], 'response')}: truncated at a cap, or another quantity."]
    of = (f"on {c[agg]} of {plural(r['compared'], 'response')} (ambiguous "
          f"{c['ambiguous']}, unexplained {c['unexplained']}, masked {c['masked']})")
    e = r["example"]
    ex = (f"; e.g. step {e['step']}, sample {e['sample_id']} ({e['tokens']} tokens): logged "
          f"{num(e['logged'], '.4g')}, prod_t rho_t {num(e['prod_rho'], '.4g')}, "
          f"exp(mean_t log rho_t) {num(e['exp_mean'], '.4g')}") if e else ""
    what = {"sum": "prod_t rho_t = exp(sum_t log rho_t)", "token": "rho_t per token",
            "mean": "exp(mean_t log rho_t)", "-sum": "prod_t pi_roll / pi_train",
            "-mean": "exp(-mean_t log rho_t)", "-token": "pi_roll / pi_train per token"}[agg]
    why = {
        "sum": "the sequence ratio sequence TIS and MIS correct with; a small mean per-token "
               "log-ratio times a long response moves it far from 1: TRL issue 5814's ratios of "
               "0.4-0.7 with matching per-token log-probs are this product, not a fault of its "
               "sum",
        "token": "the token ratio token TIS and IcePop correct with (rho = pi_train / pi_roll)",
        "mean": "the geometric mean of the token ratios, not the sequence's ratio prod_t rho_t "
                "that sequence TIS and MIS correct with: a mean in place of the sum (what TRL "
                "issue 5814 asked for, its PR 5815); a sequence correction with it weighs a "
                "response as if it had one token",
        "-sum": "the sequence ratio with its sign flipped (pi_roll / pi_train, not rho)",
        "-mean": "a mean in place of the sum, and its sign flipped",
        "-token": "the token ratio with its sign flipped (pi_roll / pi_train, not rho)",
    }[agg]
    lines = [f"the logged ratio is {what} {of}{ex}.", f"that is {why}."]
    return lines


SUMMARY = {
    "logged_ratio": "the framework's own logged importance ratio checked against log rho = "
                    "logp_train - logp_rollout: present, carriers (the formats that log one), "
                    "files, ones (1 everywhere: no correction), compared (responses), counts "
                    "(per candidate sum, mean, token, -sum, -mean, -token, and ambiguous, "
                    "unexplained, masked), aggregation (the candidate most responses match), "
                    "fault (mean_not_sum, sign_flipped, unexplained, or empty) and example",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "The logged importance ratio: sum, mean or sign",
                  "M6; TIM's corrections (V4)",
                  lambda ctx, d: logged_ratio(ctx.acc, d, ctx.complete), LoggedRatioSums,
                  summary=SUMMARY)
