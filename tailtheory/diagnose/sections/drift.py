"""When did the mismatch start to grow, and is it length or peakiness? Each step's token-mean
k3 with an onset estimate, and an exact split of its change into response length, the
distributions' peakiness and a residual scale.

Source: NeMo-RL issue 1801 (the mismatch "continuously increases ... leading to training
crash"); Precision-RL issue 10 (the FP16 paper's authors do not know whether the growth of the
mismatch KL comes from longer responses or sharper distributions); TIM (arXiv 2605.14220) for
k3 of ``log rho = logp_train - logp_rollout`` (:func:`tailtheory.core.estimators.k3`); DVP
(arXiv 2512.23087), M3, for the ``(1 - p)`` factor; V6's dose-response register
(:mod:`tailtheory.diagnose.sections.register`) for the harm edge.

**Per step** the section keeps sums only: the steps section's tokens ``N`` and ``sum k3``, its
own ``sum (1 - p)^2`` (:class:`DriftSums`), and the responses ``R`` with an included token
(from the accumulator's per-response counts). ``p`` is the rollout's probability of the sampled
token, ``1 - p = -expm1(logp_rollout)`` in float64: the distribution the responses were drawn
from. M3 holds with either side's ``p`` (exchanging the sides maps ``delta`` to ``-delta`` and
keeps ``max_j |delta_j - delta_k|``), and the two differ by ``O(|Delta|)``. Per step: the mean
length ``L = N / R``, the mean k3 per token ``k3 = sum k3 / N``, the peakiness ``q2 = E[(1 -
p)^2]`` and the residual scale ``eps2 = k3 / (2 q2)``.

**The split** (:func:`split`). M3's small-``eps`` form ``|Delta| <= 2 eps (1 - p)`` with ``k3 =
rho - 1 - log rho ~ Delta^2 / 2`` gives ``k3 <~ 2 eps^2 (1 - p)^2``, so ``eps2`` is the ``eps^2``
the envelope needs on average (a lower bound on M3's ``eps^2``, to second order). The k3 summed
over a response is ``S = L x k3 = L x q2 x 2 eps2``, an identity, so between an early window and
a late window (the first and the last fifth of the steps, each pooled over its steps' sums)::

    Delta log S  = Delta log L + Delta log q2 + Delta log eps2      (length, peakiness, scale)
    Delta log k3 =               Delta log q2 + Delta log eps2

exactly (the 2 cancels; the terms sum to the change to float precision). Longer responses can
only raise ``S``, the sequence-level KL a response's ratio carries (M6); the token-mean k3 that
frameworks log has no length term, so "is it length or peakiness" is a question about ``S``,
and a per-token growth splits into peakiness and scale alone (a length effect on the token mean,
later positions mismatching more, shows there as peakiness or scale). Sharper distributions
lower ``q2`` (a negative peakiness term); a k3 that grows while they sharpen grows by its scale.

**The onset** of the per-step ``log k3``: :mod:`tailtheory.diagnose.sections.onset` (a
one-sided CUSUM, its threshold simulated for 5% false alarms on flat AR(1) series; its rates).

**V6's harm edge**: the first step whose k3 reaches GRPO's ``k3_harm`` on the register, a
toy-scale extrapolation (a 0.7M-parameter model on a toy task), not a prediction for the run's
model.

Shapes: per batch ``(n,)``; per step ``(S,)``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tailtheory.diagnose.sections.onset import (K3_FLOOR, MIN_STEPS, onset_test,
                                               reference_size)
from tailtheory.diagnose.sections.base import STEP_GROWTH, Diagnosis, Section, num, plural
from tailtheory.diagnose.sections.register import k3_text, place_on_register

NAME = "drift"

STATUS = {"onset": "the CUSUM crossed its threshold", "no_onset": "it did not",
          "too_short": f"fewer than {MIN_STEPS} steps", "lacks_step": "a file without steps"}
"""Each value of ``status`` and what it means."""
TERMS = {"length": ("longer responses", "shorter responses"),
         "peakiness": ("flatter distributions (more probability off the sampled token)",
                       "sharper distributions"),
         "scale": ("a larger perturbation per unit of (1-p)^2", "a smaller perturbation")}
"""Each term of the split and what a positive and a negative value mean."""


class DriftSums:
    """Per step, ``sum (1 - p)^2`` over the included tokens, ``p`` the rollout's probability of
    the sampled token (``logp_train - log rho``, at most 0)."""

    def __init__(self, acc):
        self.q2: dict[int, float] = {}

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        b = t.batch
        q2 = np.expm1(np.minimum(b.logp_train[b.ok] - t.log_rho, 0.0)) ** 2   # (1 - p)^2
        uniq, inv = np.unique(b.step[b.ok], return_inverse=True)
        for s, v in zip(uniq.tolist(), np.bincount(inv, weights=q2).tolist()):
            self.q2[s] = self.q2.get(s, 0.0) + v


def step_table(acc, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step (the steps section's table ``steps``: ``step``, ``tokens``, ``k3``): ``step``,
    ``tokens``, ``responses`` (with an included token), ``length``, ``k3``, ``q2 = E[(1-p)^2]``,
    ``eps2 = k3 / (2 q2)`` and ``log_k3 = log max(k3, K3_FLOOR)``. Shapes: (S,) columns."""
    n = acc.n_seq
    has = acc.seq["n_tok"][:n] > 0
    st, cnt = np.unique(acc.seq["step"][:n][has].astype(np.int64), return_counts=True)
    responses = pd.Series(cnt, index=st).reindex(steps.step.to_numpy()).to_numpy(np.int64)
    q2 = np.array([acc.folds[NAME].q2[int(s)] for s in steps.step]) / steps.tokens.to_numpy()
    k3 = steps.k3.to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps2 = k3 / (2 * q2)
    return pd.DataFrame({"step": steps.step.to_numpy(), "tokens": steps.tokens.to_numpy(),
                         "responses": responses, "length": steps.tokens.to_numpy() / responses,
                         "k3": k3, "q2": q2, "eps2": eps2,
                         "log_k3": np.log(np.maximum(k3, K3_FLOOR))})


# --- the split --------------------------------------------------------------------------------

def window(t: pd.DataFrame, rows: slice) -> dict:
    """The pooled values of the steps ``rows`` of :func:`step_table`'s table: ``steps`` (first,
    last), ``length``, ``k3`` (at least :data:`K3_FLOOR`), ``q2``, ``eps2`` and ``S = length x
    k3``, from the sums of tokens, responses, k3 and ``(1 - p)^2``."""
    w = t.iloc[rows]
    n = float(w.tokens.sum())
    k3 = max(float((w.k3 * w.tokens).sum()) / n, K3_FLOOR)
    q2 = float((w.q2 * w.tokens).sum()) / n
    length = n / float(w.responses.sum())
    return {"steps": [int(w.step.iloc[0]), int(w.step.iloc[-1])], "length": length, "k3": k3,
            "q2": q2, "eps2": k3 / (2 * q2) if q2 > 0 else math.nan, "S": length * k3}


def split(early: dict, late: dict) -> dict | None:
    """The exact split of the change of ``log S`` (``S``: k3 summed over a response) and of
    ``log k3`` (per token) from ``early`` to ``late`` (:func:`window`) into ``length``,
    ``peakiness`` (``log q2``) and ``scale`` (``log eps2``): ``response`` (``total``,
    ``length``, ``peakiness``, ``scale``), ``token`` (``total``, ``peakiness``, ``scale``),
    ``dominant`` (the term of largest magnitude in ``response``; the verdict names it when it
    is at least :data:`~tailtheory.diagnose.sections.base.STEP_GROWTH`-fold), ``early`` and
    ``late``.
    None when a window's ``q2`` is 0 (every token at ``p = 1``)."""
    if not (early["q2"] > 0 and late["q2"] > 0):
        return None
    d = {k: math.log(late[k]) - math.log(early[k]) for k in ("length", "k3", "q2", "eps2", "S")}
    response = {"total": d["S"], "length": d["length"], "peakiness": d["q2"], "scale": d["eps2"]}
    token = {"total": d["k3"], "peakiness": d["q2"], "scale": d["eps2"]}
    dominant = max(("length", "peakiness", "scale"), key=lambda k: abs(response[k]))
    return {"early": early, "late": late, "response": response, "token": token,
            "dominant": dominant}


# --- V6's harm edge ---------------------------------------------------------------------------

def harm_edge(t: pd.DataFrame, mean_k3, register) -> dict:
    """Where the per-step k3 first reaches GRPO's ``k3_harm`` on V6's register
    (:func:`~tailtheory.diagnose.sections.register.place_on_register` of the run's ``mean_k3``
    on ``register``): ``k3_harm`` (None where not measured, with ``reason``), ``step`` (None
    when no step reaches it), ``max_step_k3`` and ``max_step``."""
    p = place_on_register(0.0 if mean_k3 is None or math.isnan(mean_k3) else mean_k3, register)
    j = int(np.argmax(t.k3.to_numpy()))
    out = {"k3_harm": None, "reason": p["reason"] or p["placement"], "step": None,
           "max_step_k3": float(t.k3.iloc[j]), "max_step": int(t.step.iloc[j])}
    if not math.isnan(p["k3_harm"]) and p["monotone"] is not False:
        at = np.flatnonzero(t.k3.to_numpy() >= p["k3_harm"])
        out.update(k3_harm=p["k3_harm"], reason="",
                   step=int(t.step.iloc[at[0]]) if len(at) else None)
    return out


# --- the section ------------------------------------------------------------------------------

def _factor(log_ratio: float) -> str:
    return f"{num(math.exp(log_ratio), '.3g')}x (log {log_ratio:+.3g})"


def onset_line(r: dict) -> str:
    """The onset test in one line."""
    if r["status"] in ("too_short", "lacks_step"):
        return (f"too short: {plural(r['steps'], 'step')}; the onset test needs {MIN_STEPS}."
                if r["status"] == "too_short" else r["reason"] + ".")
    ref = (f"reference steps {r['reference'][0]}-{r['reference'][1]}: log k3 {r['mu']:.3g} "
           f"+- {r['sd']:.3g}, AR(1) {r['phi']:.2g} (fitted {r['phi_fit']:.2g}); threshold "
           f"{r['threshold']:.3g} simulated for {r['alpha']:.0%} false alarms over "
           f"{r['steps']} steps")
    if r["status"] == "onset":
        return (f"ONSET at step {r['onset_step']}: the token-mean k3 began to rise there (the "
                f"CUSUM of log k3 crossed its threshold at step {r['crossing_step']}; {ref}).")
    return (f"no onset over {r['steps']} steps: the CUSUM of log k3 stayed below its threshold "
            f"(largest {r['cusum_max']:.3g}; {ref}).")


def split_lines(s: dict | None) -> list[str]:
    """The split of :func:`split` in words: the response line, the token line, the terms."""
    if s is None:
        return ["length or peakiness: cannot split (a window's tokens all have p = 1)."]
    a, b, r, t = s["early"], s["late"], s["response"], s["token"]
    top = s["dominant"]
    answer = (f"mostly {top} ({TERMS[top][r[top] < 0]})" if abs(r[top]) >= math.log(STEP_GROWTH)
              else f"no term beyond {STEP_GROWTH:g}x, nothing to attribute")
    return [f"length or peakiness, steps {a['steps'][0]}-{a['steps'][1]} to "
            f"{b['steps'][0]}-{b['steps'][1]}: the k3 summed over a response changed "
            f"{_factor(r['total'])} = length {r['length']:+.3g} + peakiness "
            f"{r['peakiness']:+.3g} + scale {r['scale']:+.3g}: {answer}.",
            f"per token (the mean k3 a framework logs; no length term): {_factor(t['total'])} "
            f"= peakiness {t['peakiness']:+.3g} + scale {t['scale']:+.3g}.",
            f"terms: length = log mean response length ({a['length']:.3g} -> {b['length']:.3g} "
            f"tokens); peakiness = log E[(1-p)^2], p the rollout's probability of the sampled "
            f"token ({a['q2']:.3g} -> {b['q2']:.3g}); scale = log eps^2 = log(mean k3 / "
            f"(2 E[(1-p)^2])) ({a['eps2']:.3g} -> {b['eps2']:.3g}), from M3's small-eps "
            f"envelope k3 ~ Delta^2/2 <= 2 eps^2 (1-p)^2."]


def harm_line(h: dict) -> str:
    """V6's harm edge in one line, labelled as the toy-scale extrapolation it is."""
    head = ("V6's harm edge, a toy-scale extrapolation (measured on a 0.7M-parameter model on a "
            "toy task; not a prediction for this model): ")
    if h["k3_harm"] is None:
        return head + f"not measured ({h['reason']})."
    if h["step"] is not None:
        return head + (f"k3_harm = {k3_text(h['k3_harm'])}; the per-step k3 first reaches it at "
                       f"step {h['step']}.")
    below = f", {h['k3_harm'] / h['max_step_k3']:.2g}x below" if h["max_step_k3"] > 0 else ""
    return head + (f"k3_harm = {k3_text(h['k3_harm'])}; no step reaches it (largest step k3 "
                   f"{num(h['max_step_k3'])} at step {h['max_step']}{below}).")


def drift_section(ctx, d: Diagnosis) -> dict:
    """From the steps section's table and :class:`DriftSums`: ``d.summary["drift"]``, the table
    ``drift`` (:func:`step_table` with ``cusum`` and ``window``) and the verdict lines."""
    t = step_table(ctx.acc, d.tables["steps"])
    lacks = [str(x.path) for x in ctx.acc.dumps if "step" in x.lacks]
    n, m = len(t), reference_size(len(t))
    r = {**onset_test([], []), "status": "lacks_step", "steps": n} if lacks else \
        onset_test(t.step, t.log_k3)
    why = "every row there is step 0, so its steps cannot be told apart and the onset is not tested"
    r["reason"] = f"no column step in {plural(len(lacks), 'file')}: {why}" if lacks else ""
    s = split(window(t, slice(0, m)), window(t, slice(n - m, n))) if n >= 2 and not lacks \
        else None
    side = np.full(n, "", dtype=object)
    if n >= 2:
        side[:m], side[n - m:] = "early", "late"
    c = r.pop("cusum")
    d.tables[NAME] = t.assign(cusum=c if len(c) == n else np.nan, window=side)
    r.update(min_steps=MIN_STEPS, k3_floor=K3_FLOOR, split=s,
             harm=harm_edge(t, d.summary.get("k3"), ctx.register))
    d.summary[NAME] = r
    first = (f"no column step in {plural(len(lacks), 'file')} ({', '.join(lacks[:3])}"
             f"{', ...' if len(lacks) > 3 else ''}): {why}." if lacks else onset_line(r))
    d.verdicts[NAME] = ([first] + (split_lines(s) if n >= 2 and not lacks else [])
                        + [harm_line(r["harm"])])
    return r


def drift_brief(r: dict | None) -> str | None:
    """The onset and the split in a clause of the bottom line (None without an onset)."""
    if not r or r["status"] != "onset":
        return None
    out = (f"the token-mean k3 began to rise at step {r['onset_step']} (CUSUM, "
           f"{r['alpha']:.0%} false alarms)")
    s = r["split"]
    if s is not None:
        rr = s["response"]
        out += (f"; its sum over a response changed {math.exp(rr['total']):.3g}x from the "
                f"first to the last fifth of the steps, mostly {s['dominant']} (log "
                + ", ".join(f"{k} {rr[k]:+.2g}" for k in ("length", "peakiness", "scale"))
                + ")")
    if r["harm"]["step"] is not None:
        out += f"; it reaches V6's toy-scale harm edge at step {r['harm']['step']}"
    return out


def _figure(d: Diagnosis, plt):
    t, r = d.tables[NAME], d.summary[NAME]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    a.plot(t.step, np.exp(t.log_k3), "o-", ms=3, label="token-mean k3")
    if r["reference"]:
        a.axvspan(r["reference"][0] - 0.5, r["reference"][1] + 0.5, color="0.9",
                  label="reference")
    if r["onset_step"] is not None:
        a.axvline(r["onset_step"] - 0.5, color="C3", ls=":", label=f"onset {r['onset_step']}")
    if r["harm"]["k3_harm"] is not None:
        a.axhline(r["harm"]["k3_harm"], color="C1", ls="--", lw=1,
                  label="V6 harm edge (toy scale)")
    a.set(xlabel="step", ylabel="k3", yscale="log", title=f"Drift: {r['status']}")
    a.legend(fontsize=7)
    s = r["split"]
    if s is not None:
        for x, part in enumerate(("response", "token")):
            up = down = 0.0
            for j, term in enumerate(("length", "peakiness", "scale")):
                v = s[part].get(term, 0.0)
                b.bar(x, v, bottom=up if v >= 0 else down, color=f"C{j}",
                      label=term if x == 0 else None)
                up, down = (up + v, down) if v >= 0 else (up, down + v)
            b.plot(x, s[part]["total"], "k_", ms=20, mew=2, label="total" if x == 0 else None)
        b.set_xticks([0, 1], ["per response", "per token"])
        b.axhline(0, color="k", lw=0.5)
        b.set(ylabel="change of log k3", title="Length or peakiness")
        b.legend(fontsize=7)
    else:
        b.axis("off")
    return fig, t


SUMMARY = {
    "drift": "when the mismatch started to grow and whether by length or peakiness: status "
             "(onset, no_onset, too_short, lacks_step) and reason, steps, min_steps, the onset "
             "test on log k3 per step (reference: its first and last step, mu, sd, phi_fit, "
             "phi, k, alpha, n_sim, threshold, cusum_max, crossing_step, onset_step), k3_floor, "
             "split (early and late windows: steps, length, k3, q2 = E[(1-p)^2] with p the "
             "rollout's, eps2, S; response: total, length, peakiness, scale; token: total, "
             "peakiness, scale; dominant; null when it cannot be split) and harm (V6's k3_harm, "
             "a toy-scale extrapolation: step first reaching it, reason, max_step_k3, max_step)",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Drift: when did the mismatch start to grow, length or peakiness?",
                  "TIM's k3; M3; V6 (NeMo-RL issue 1801, Precision-RL issue 10)",
                  drift_section, DriftSums, _figure, summary=SUMMARY)
