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

**The onset** (:func:`onset_test`), on ``x = log max(k3, K3_FLOOR)`` per step: a one-sided
upward CUSUM ``C_t = max(0, C_{t-1} + (x_t - mu) / sd - CUSUM_K)`` with ``mu`` and ``sd`` the
mean and sd of the reference window (the first fifth of the steps, :data:`REF_SHARE`; ``sd``
at least :data:`LOG_SD_FLOOR`). Its threshold ``h`` is the ``1 - ALPHA`` quantile of ``max_t C_t``
over :data:`N_SIM` simulated flat series of the run's length (seeded, :data:`SEED`) with AR(1)
noise of the coefficient fitted on the reference window, each standardised by its own reference
window as the run is (the statistic is invariant to location and scale, so the AR(1)
coefficient is the null's only parameter): a 5% false-alarm rate for the whole series (the
family of its steps). The coefficient used is the reference window's lag-1 autocorrelation
with Kendall's bias correction ``+ (1 + 3 phi) / m``, plus one standard error ``sqrt((1 -
phi^2) / m)``, clipped to ``[0, PHI_MAX]``: from a few steps the plain estimate is too low and
would let the false alarms exceed 5%. The onset is the first step of the CUSUM's excursion that
crosses ``h`` (the step after its last 0 before the crossing). Fewer than :data:`MIN_STEPS`
steps: too short (status ``too_short``, no test); a file without steps (every row step 0):
``lacks_step``.

Measured with this rule on simulated log k3 (1,000 series per cell, a standard error of 0.7%
at 5%; the slow test ``test_false_alarms_measured`` repeats the ``phi <= 0.3`` rows):

=============================  =====  =====  =====  =====  =====
steps                            20     40     60    100    200
=============================  =====  =====  =====  =====  =====
false alarms, flat, phi = 0     1.9%   2.2%   1.5%   2.4%   2.7%
false alarms, phi = 0.3         4.0%   4.1%   4.3%   5.5%   4.2%
false alarms, phi = 0.6         9.3%   7.3%   7.4%   6.7%   6.4%
=============================  =====  =====  =====  =====  =====

Above ``phi = 0.3`` the false alarms exceed 5%: a reference of a fifth of the steps cannot see a
slow wander. A rise from the middle step found within 5 steps of its start: a ramp of 0.5 sd
per step 91% / 97% / 99% (40 / 60 / 100 steps, ``phi = 0``; 76% / 91% / 95% at ``phi = 0.3``);
a jump of 3 sd 81% / 94% / 98% (58% / 76% / 93%).

**V6's harm edge**: the first step whose k3 reaches GRPO's ``k3_harm`` on the register, a
toy-scale extrapolation (a 0.7M-parameter model on a toy task), not a prediction for the run's
model.

Shapes: per batch ``(n,)``; per step ``(S,)``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from tailtheory.diagnose.sections.base import STEP_GROWTH, Diagnosis, Section, num, plural
from tailtheory.diagnose.sections.register import k3_text, place_on_register

NAME = "drift"

MIN_STEPS = 20
"""Fewest steps the onset test needs (issue 61): below, "too short"."""
REF_SHARE = 0.2
"""The reference window of the CUSUM and the split's early window: the first fifth of the
steps (the split's late window: the last fifth)."""
ALPHA = 0.05
"""False-alarm rate of the onset test over a whole flat series."""
N_SIM = 2000
"""Simulated flat AR(1) series behind the threshold (the 95% quantile to about 0.5%)."""
SEED = 61
"""Seed of the simulation: the same run gets the same threshold."""
SIM_NUMBERS = 2_000_000
"""Simulated values held at a time (paths x steps), bounding the memory of long runs."""
CUSUM_K = 1.0
"""The CUSUM's allowance in reference sd: tuned to a rise of 2 sd of log k3 (``k = shift / 2``);
at 0.5 the onset falls several steps early more often (the test's planted ramps)."""
PHI_MAX = 0.9
"""Largest AR(1) coefficient of the null: a series wandering slower cannot be told from drift."""
K3_FLOOR = 1e-12
"""A step's mean k3 below this counts as it (log k3 of a bitwise-equal step is finite): the k3
of an rms ``|log rho|`` of 1.4e-6, a few float32 units of a log-prob, rounding, not drift."""
LOG_SD_FLOOR = 0.01
"""Smallest sd of the reference's log k3 (a reference of equal steps: a 1% change is one sd)."""
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


# --- the onset --------------------------------------------------------------------------------

def reference_size(n: int) -> int:
    """Steps in the reference (and each split) window of ``n`` steps: the first fifth, at
    least 1 (2 for the CUSUM's sd)."""
    return max(1, math.ceil(REF_SHARE * n))


def fit_ar1(x) -> dict:
    """Mean, sd (ddof 1), lag-1 autocorrelation ``phi_fit`` and the coefficient the null uses,
    ``phi`` (bias-corrected, plus one standard error, clipped to ``[0, PHI_MAX]``) of the
    reference window ``x``. Shapes: (m,) -> scalars."""
    x = np.asarray(x, np.float64)
    m, r = len(x), x - x.mean()
    ss = float(r @ r)
    phi_fit = float(r[:-1] @ r[1:]) / ss if ss > 0 else 0.0
    phi = float(np.clip(phi_fit + (1 + 3 * phi_fit) / m, -PHI_MAX, PHI_MAX))
    phi = float(np.clip(phi + math.sqrt((1 - phi ** 2) / m), 0.0, PHI_MAX))
    return {"mu": float(x.mean()), "sd": math.sqrt(ss / (m - 1)), "phi_fit": phi_fit,
            "phi": phi}


def cusum(x, m: int, k: float = CUSUM_K, sd_floor: float = 0.0) -> np.ndarray:
    """The one-sided upward CUSUM of ``x`` standardised by its first ``m`` values:
    ``C_t = max(0, C_{t-1} + (x_t - mu) / max(sd, sd_floor) - k)``, ``C_{-1} = 0``.
    Shapes: x (..., n) -> (..., n)."""
    x = np.asarray(x, np.float64)
    ref = x[..., :m]
    sd = np.maximum(ref.std(-1, ddof=1, keepdims=True), sd_floor)
    z = (x - ref.mean(-1, keepdims=True)) / sd - k
    out, c = np.empty_like(z), np.zeros(z.shape[:-1])
    for t in range(z.shape[-1]):
        c = np.maximum(c + z[..., t], 0.0)
        out[..., t] = c
    return out


def threshold(n: int, m: int, phi: float, *, alpha: float = ALPHA, n_sim: int = N_SIM,
              seed: int = SEED, k: float = CUSUM_K) -> float:
    """The ``1 - alpha`` quantile of ``max_t C_t`` (:func:`cusum`) over ``n_sim`` stationary
    AR(1) series of length ``n`` and coefficient ``phi``, each standardised by its first ``m``
    values: the threshold of a ``alpha`` false-alarm rate over a flat series."""
    rng = np.random.default_rng(seed)
    block, maxima = max(1, SIM_NUMBERS // n), []
    for start in range(0, n_sim, block):
        e = rng.standard_normal((min(block, n_sim - start), n))
        e[:, 0] /= math.sqrt(1 - phi ** 2)                     # a stationary start
        maxima.append(cusum(lfilter([1.0], [1.0, -phi], e, axis=-1), m, k).max(-1))
    return float(np.quantile(np.concatenate(maxima), 1 - alpha, method="higher"))


def onset_test(steps, log_k3, *, alpha: float = ALPHA, n_sim: int = N_SIM,
               seed: int = SEED) -> dict:
    """The onset of a rise of ``log_k3`` over ``steps`` (the module's rule). Returns ``status``
    (``onset``, ``no_onset``, ``too_short``), ``steps``, ``reference`` (its first and last
    step), the reference's ``mu``, ``sd``, ``phi_fit`` and ``phi``, ``k``, ``alpha``, ``n_sim``,
    ``threshold``, ``cusum_max``, ``crossing_step`` and ``onset_step`` (None without an onset)
    and ``cusum`` (per step; NaN when too short). Raises ``ValueError`` when the two lengths
    differ or a value is not finite. Shapes: (S,) each."""
    steps, x = np.asarray(steps, np.int64), np.asarray(log_k3, np.float64)
    n = len(x)
    if len(steps) != n:
        raise ValueError(f"{plural(len(steps), 'step')} but {plural(n, 'value')} of log k3")
    if not np.isfinite(x).all():
        raise ValueError(f"log k3 must be finite (floor k3 at {K3_FLOOR:g} first), got "
                         f"{x[~np.isfinite(x)][0]} at step {steps[~np.isfinite(x)][0]}")
    out = {"status": "too_short", "steps": n, "reference": None, "mu": None, "sd": None,
           "phi_fit": None, "phi": None, "k": CUSUM_K, "alpha": alpha, "n_sim": n_sim,
           "threshold": None, "cusum_max": None, "crossing_step": None, "onset_step": None,
           "cusum": np.full(n, np.nan)}
    if n < MIN_STEPS:
        return out
    m = reference_size(n)
    c = cusum(x, m, sd_floor=LOG_SD_FLOOR)
    fit = fit_ar1(x[:m])
    h = threshold(n, m, fit["phi"], alpha=alpha, n_sim=n_sim, seed=seed)
    out.update(fit, status="no_onset", reference=[int(steps[0]), int(steps[m - 1])],
               sd=max(fit["sd"], LOG_SD_FLOOR), threshold=h, cusum_max=float(c.max()),
               cusum=c)
    over = np.flatnonzero(c > h)
    if len(over):
        zeros = np.flatnonzero(c[:over[0]] == 0)
        out.update(status="onset", crossing_step=int(steps[over[0]]),
                   onset_step=int(steps[zeros[-1] + 1 if len(zeros) else 0]))
    return out


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
