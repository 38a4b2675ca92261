"""The bottom line, last: what to do, from the run's place on the register
(:mod:`tailtheory.diagnose.sections.register`) and the faults found
(:mod:`tailtheory.diagnose.sections.faults`), then the onset of a growing mismatch and its
split (:mod:`~tailtheory.diagnose.sections.drift`), the certification
(:mod:`~tailtheory.diagnose.sections.certify`), the check across a resume
(:mod:`~tailtheory.diagnose.sections.resume`), the logged ratio's aggregation
(:mod:`~tailtheory.diagnose.sections.logged_ratio`), the responses MIS would mask
(:mod:`~tailtheory.diagnose.sections.seq_ratio`) and the samples beyond the run's numerical noise
(:mod:`~tailtheory.diagnose.sections.beyond_noise`), with the register's caveat of scale.

Source: the register of :mod:`tailtheory.tim.dose` (V6), the fault checks, prime-rl's bar
(PR 2672), TIM's corrections (V4).
"""

from __future__ import annotations

from tailtheory.diagnose.sections.base import Section
from tailtheory.diagnose.sections.beyond_noise import bottom_line_words
from tailtheory.diagnose.sections.drift import drift_brief
from tailtheory.diagnose.sections.register import k3_text

NAME = "bottom_line"

SOURCE_FIX = ("lower the mismatch at its source: the same precision and kernels on both sides "
              "(e.g. an fp32 LM head in the sampler, no fp8 KV cache), the trainer's log-probs "
              "recomputed at the sampling weights")
"""What the bottom line advises where no measured remedy helps."""
ACTIONS = ("nothing", "watch", "remedy", "reduce_mismatch", "fix_temperature", "no_verdict")
"""Every value of the bottom line's ``action``."""


def bottom_line(d) -> dict:
    """What to do, from the run's placement on the register (``d.points["register"]``) and the
    faults found (``d.points["faults"]``), as ``{"action": one of ACTIONS, "text": ...}``; also
    ``d.summary["bottom_line"]`` and the verdict ``d.verdicts["bottom_line"]``.

    ``fix_temperature`` when the two sides look scored at different temperatures (the k3 then
    measures that gap); ``nothing`` when the run's k3 is at or below ``k3_safe``; ``watch``
    between ``k3_safe`` and ``k3_harm``; at or above ``k3_harm`` ``remedy`` naming the remedies
    that kept GRPO unharmed there with the k3 they were measured at, else ``reduce_mismatch``
    (:data:`SOURCE_FIX`); ``no_verdict`` where the register gives no threshold. Then, in the
    text, the onset of a growing mismatch with its split into length, peakiness and scale, the
    certification's verdict, a jump across a resume, a logged ratio aggregated by its mean or with
    its sign flipped, the share of responses MIS would mask and the samples beyond the run's
    numerical noise (:func:`also`). The text always ends with the caveat of scale."""
    p = d.points.get("register")
    faults = {f.name: f for f in d.points.get("faults", [])}
    k3 = d.summary.get("k3")
    short = ("the register was measured on a 0.7M-parameter model on a toy task: an order of "
             "magnitude to check, not a threshold that transfers")
    if "temperature" in faults:
        f = faults["temperature"].stats
        action, text = "fix_temperature", (
            f"score both sides at the sampling temperature first (logp_rollout scales as "
            f"{f['slope']:.3g} x logp_train): this run's k3 {k3_text(k3)} measures the temperature "
            f"gap, not numerical mismatch; rerun diagnose after the fix")
    elif p is None:
        action, text = "no_verdict", f"the run's k3 is {k3}: it cannot be placed on the register"
    else:
        where, safe, harm = p["placement"], k3_text(p["k3_safe"]), k3_text(p["k3_harm"])
        harmed_paths = [r for r in p["real_paths"] if r["harmed"] is True
                        and r["k3"] is not None and r["k3"] <= p["mean_k3"]]
        if where == "below_safe":
            action = "nothing"
            text = (f"nothing: this run's k3 {k3_text(k3)} is below the register's safe level "
                    f"k3_safe = {safe} (GRPO was harmed from k3_harm = {harm})")
            low = [r for r in p["real_paths"] if r["harmed"] is True and r["k3"] is not None
                   and r["k3"] < p["k3_safe"]]
            if low:
                text += ("; but " + ", ".join(f"the real path {r['path']} was harmed at k3 = "
                                              f"{k3_text(r['k3'])}" for r in low)
                         + ", below k3_safe: on such a path, k3 alone does not clear a run")
        elif where == "between":
            action = "watch"
            text = (f"watch k3 over steps: this run's k3 {k3_text(k3)} lies between "
                    f"k3_safe = {safe} and k3_harm = {harm}, where the register measured "
                    f"nothing; at k3_harm, "
                    + _at_harm(p))
        elif where == "at_or_above_harm":
            good = [r for r in p["remedies"] if r["moves_threshold"] is True]
            action = "remedy" if good else "reduce_mismatch"
            text = f"this run's k3 {k3_text(k3)} is at or above k3_harm = {harm}: " + _at_harm(p)
        else:
            action = "no_verdict"
            text = (f"no verdict from the register for this run's k3 {k3_text(k3)}: "
                    + {"beyond_sweep": f"above every k3 measured ({safe}), none harmed",
                       "undetermined": f"GRPO's threshold is not determined ({p['reason']})",
                       "unavailable": f"the register is unavailable ({p['reason']})"}[where])
        if harmed_paths and where not in ("below_safe",):
            text += ("; real path(s) harmed at this k3 or below: "
                     + ", ".join(f"{r['path']} ({k3_text(r['k3'])})" for r in harmed_paths))
    text = "; ".join([text, *also(d.summary)]) + f" (caveat: {short})."
    out = {"action": action, "text": text}
    d.summary["bottom_line"] = out
    d.verdicts["bottom_line"] = [text]
    return out


def also(summary: dict) -> list[str]:
    """What the bottom line adds after its action: the onset of a growing mismatch and its
    split (``drift``, :func:`~tailtheory.diagnose.sections.drift.drift_brief`), the
    certification's verdict
    (``certify``), a jump across the resume (``resume``), a logged ratio that is not the one
    the corrections define
    (``logged_ratio``), the responses MIS would mask and why (``seq_ratio``), the samples beyond
    the run's numerical noise and its run-wide checks flagged (``beyond_noise``); each where the
    summary has it."""
    out = []
    brief = drift_brief(summary.get("drift"))
    if brief:
        out.append(brief)
    c = summary.get("certify")
    if c:
        bar = f"mean k3 <= {c['bar']:g} at every step" if c["bar"] else "bitwise equal"
        out.append(f"certification ({bar}, at least {c['min_steps']} steps): " + {
            "pass": f"passes over {c['steps']} steps",
            "fail": f"fails at {len(c['failing_steps'])} of {c['steps']} steps (first: step "
                    f"{c['failing_steps'][0]['step'] if c['failing_steps'] else '?'})",
            "undecided": f"cannot decide ({c['reason']})"}[c["verdict"]])
    m = summary.get("resume")
    if m:
        out.append(f"resume at step {m['at']}: " + (
            "a jump in the " + ", ".join(f"{s['name']} ({s['z']:+.3g} robust sd)"
                                         for s in m["series"] if s["jump"])
            + ": check what the checkpoint restored (weights, optimizer, sampler state)"
            if m["jump"] else f"no jump over {m['side']} steps each side"))
    r = summary.get("logged_ratio")
    if r and r.get("fault") in ("mean_not_sum", "sign_flipped"):
        out.append("the logged ratio is " + (
            "exp(mean_t log rho_t), not prod_t rho_t: fix its aggregation (sum the log-ratios) "
            "before trusting its sequence correction" if r["fault"] == "mean_not_sum" else
            "pi_roll / pi_train, the inverse of rho: fix its sign"))
    q = summary.get("seq_ratio")
    mis = next((m for m in (q or {}).get("methods", []) if m["method"] == "mis"), None)
    if mis and mis["responses"]:
        o = q["outside_mis"]
        why = "" if o["length"] is None else (
            ", by their length" if o["length"] >= o["size"] else ", by their per-token size")
        out.append(f"MIS at its defaults would mask {mis['responses']} of {q['responses']} "
                   f"responses{why}")
    out.extend(bottom_line_words(summary.get("beyond_noise")))
    return out


def _at_harm(p: dict) -> str:
    """The remedies of the register at k3_harm in words: those that kept GRPO unharmed, with
    the k3 they were measured at, else :data:`SOURCE_FIX`."""
    from tailtheory.tim.dose import REMEDIES

    name = {v: k for k, v in REMEDIES.items()}
    good = [r for r in p["remedies"] if r["moves_threshold"] is True]
    if good:
        return ("apply " + " or ".join(f"{name.get(r['method'], r['method'])} (unharmed at "
                                       f"k3 = {k3_text(r['k3'])})" for r in good)
                + ", the remedies that kept GRPO unharmed on the register")
    tried = ", ".join(f"{name.get(r['method'], r['method'])} at k3 = {k3_text(r['k3'])}"
                      for r in p["remedies"] if r["moves_threshold"] is False)
    return ("no remedy measured on the register kept GRPO unharmed"
            + (f" ({tried}: all harmed)" if tried else " (none measured yet)")
            + f", so {SOURCE_FIX}")


SUMMARY = {
    "bottom_line": "what to do: action (nothing, watch, remedy, reduce_mismatch, "
                   "fix_temperature, no_verdict) and text, with the register's caveat of scale",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Bottom line: what to do", "V6's register and the faults",
                  lambda ctx, d: bottom_line(d), summary=SUMMARY)
