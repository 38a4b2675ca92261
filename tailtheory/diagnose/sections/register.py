"""The run's mean k3 placed on the mismatch dose-response register (claim V6), with its caveat
of scale; also ``register.json``.

Source: TIM (Zhong et al., arXiv 2605.14220) for k3 as the mismatch monitor; the register is
the dose-response of :mod:`tailtheory.tim.dose` (V6, beyond the papers): GRPO on the ``learn``
recipe with a controlled logit noise on the rollouts, ``k3_safe`` the largest measured mean
per-token k3 at which it was not harmed, ``k3_harm`` the first at which it was; the remedies of
:data:`tailtheory.tim.dose.REMEDIES` at :data:`tailtheory.tim.dose.REMEDY_SIGMA`; the real
rollout paths (bf16, fp16, fp8, ...) on the same axis.

The run's quantity is ``summary.json``'s ``k3``: the token-weighted mean of
``k3 = rho - 1 - log rho`` over every included token (the register's k3 is the mean over a
run's steps of each step's token mean; with steps of similar length the two agree). Only
measured numbers are named: a threshold that is pending, not monotone or not stored is said to
be so, and the run is then not placed.
"""

from __future__ import annotations

import json
import math
from numbers import Real

from tailtheory.diagnose.sections.base import Diagnosis, Section, json_safe

NAME = "register"

PLACEMENTS = {
    "below_safe": "at or below k3_safe: no harm measurable at toy scale",
    "between": "between k3_safe and k3_harm: not measured there",
    "at_or_above_harm": "at or above k3_harm: GRPO was harmed at this mismatch at toy scale",
    "beyond_sweep": "above every k3 measured, none of them harmed: no measurement this large",
    "undetermined": "GRPO's logit-noise threshold is not determined yet",
    "unavailable": "the register could not be read",
}
"""Each value of :func:`place_on_register`'s ``placement`` and what it means."""

CAVEAT = ("the register was measured on a 0.7M-parameter model on a toy task (kk_trace, 2 "
          "people; learning recipe `learn`): its thresholds do not transfer to large models as "
          "numbers, only as an order of magnitude to check.")
"""Printed with every placement."""


def load_register() -> tuple[list[dict], dict]:
    """The stored register: ``(register_table rows, missing)``, ``missing`` mapping each arm
    label to the seeds not stored yet. Raises
    :class:`~tailtheory.core.measurements.StaleMeasurement` when it is missing or stale."""
    from tailtheory.experiments.study import get_study
    from tailtheory.tim.dose import STUDY, register_table

    m = get_study(STUDY.name).data("quick")
    return register_table(m), dict(m.missing)


def _check_k3(mean_k3) -> float:
    if isinstance(mean_k3, bool) or not isinstance(mean_k3, Real):
        raise ValueError(f"mean k3 must be a number, got {mean_k3!r}")
    x = float(mean_k3)
    if math.isnan(x) or x < 0:
        raise ValueError(f"mean k3 must be >= 0 (k3 = rho - 1 - log rho is never negative), "
                         f"got {x}")
    return x


def _nan(x) -> float:
    return math.nan if x is None else float(x)


def place_on_register(mean_k3: float, register: list[dict] | None = None) -> dict:
    """Where a run's mean per-token k3 sits on GRPO's logit-noise threshold (V6).

    ``register``: rows of :func:`tailtheory.tim.dose.register_table`; ``None`` reads the stored
    one (:func:`load_register`), and when that fails the placement is ``unavailable``, not an
    error. ``mean_k3`` must be a number ``>= 0`` (``inf`` allowed); a negative or NaN value is a
    ``ValueError``.

    Returns a plain dict: ``mean_k3``; ``placement`` (a key of :data:`PLACEMENTS`);
    ``reason`` (why a run is not placed, else ``""``); GRPO's ``k3_safe``, ``k3_harm``,
    ``sigma_harm`` (NaN where not measured), ``monotone``, ``well_formed`` (of the first harmed
    point) and ``pending`` (sigmas with fewer than 3 seeds); ``remedies`` (``method``, ``sigma``,
    ``k3``, ``harmed``, ``moves_threshold``: True / False / None = not measured);
    ``real_paths`` (``path``, ``k3``, ``harmed``, ``seeds``); ``missing`` (arm label -> seeds
    not stored, when read from the store).
    """
    x = _check_k3(mean_k3)
    missing: dict = {}
    out = {"mean_k3": x, "placement": "undetermined", "reason": "", "k3_safe": math.nan,
           "k3_harm": math.nan, "sigma_harm": math.nan, "monotone": None, "well_formed": None,
           "pending": [], "remedies": [], "real_paths": [], "missing": missing}
    if register is None:
        from tailtheory.core.measurements import StaleMeasurement

        try:
            register, missing = load_register()
        except (StaleMeasurement, OSError) as exc:
            return {**out, "placement": "unavailable", "reason": str(exc)}
        out["missing"] = missing
    grpo = next((r for r in register if r.get("method") == "grpo" and r.get("kind") == "logit"),
                None)
    for r in register:
        if "moves_threshold" in r:
            out["remedies"].append({k: r.get(k) for k in ("method", "sigma", "k3", "harmed",
                                                          "moves_threshold")})
        elif r.get("method") == "grpo" and r.get("kind") not in ("logit", "weight"):
            out["real_paths"].append({"path": r["kind"], "k3": r.get("k3"),
                                      "harmed": r.get("harmed"), "seeds": r.get("seeds")})
    if grpo is None:
        out["reason"] = "no GRPO logit-noise point is stored yet"
        return out
    safe, harm = _nan(grpo.get("k3_safe")), _nan(grpo.get("k3_harm"))
    pending = sorted(grpo.get("pending") or [])
    out.update(k3_safe=safe, k3_harm=harm, sigma_harm=_nan(grpo.get("sigma_harm")),
               monotone=grpo.get("monotone"), well_formed=grpo.get("well_formed"),
               pending=pending)
    pend = ", ".join(f"{s:g}" for s in pending)
    if not math.isnan(harm):
        if not grpo.get("monotone", True):
            out["reason"] = "harm is not monotone in sigma, so there is no threshold"
        elif x >= harm:
            out["placement"] = "at_or_above_harm"
        elif not math.isnan(safe) and x <= safe:
            out["placement"] = "below_safe"
        elif math.isnan(safe):
            out["reason"] = ("GRPO was harmed at the smallest sigma compared, so no k3 without "
                             "harm is measured below k3_harm")
        else:
            out["placement"] = "between"
    elif pending:
        out["reason"] = f"no harm measured yet and sigmas {pend} still lack seeds"
    elif math.isnan(safe):
        out["reason"] = "no GRPO logit-noise point has its 3 seeds yet"
    else:
        out["placement"] = "below_safe" if x <= safe else "beyond_sweep"
    return out


def k3_text(x) -> str:
    """A k3 (or a threshold on it) in words: two significant digits, ``not measured`` where it
    is None or NaN."""
    return "not measured" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2g}"


def _remedy(r: dict) -> str:
    from tailtheory.tim.dose import REMEDIES

    name = {v: k for k, v in REMEDIES.items()}.get(r["method"], r["method"])
    state = {True: "moves the threshold (not harmed)",
             False: "does not move it (harmed)",
             None: "not measured yet (fewer than 3 seeds)"}[r["moves_threshold"]]
    return f"{name} {state}"


def placement_lines(p: dict) -> list[str]:
    """The placement of :func:`place_on_register` in words: the run's k3, where it sits (or
    why it is not placed), the remedies where GRPO was harmed, the real paths, what is not
    stored yet, and always :data:`CAVEAT`."""
    lines = [f"mean per-token k3 of this run: {p['mean_k3']:.3g} (token-weighted; summary.json "
             f"`k3`)."]
    where, safe, harm = p["placement"], k3_text(p["k3_safe"]), k3_text(p["k3_harm"])
    if where == "unavailable":
        lines.append(f"the dose-response register (V6) is unavailable: {p['reason']}. The run is "
                     f"not placed; no threshold is given.")
    elif where == "undetermined":
        so_far = ""
        if not math.isnan(p["k3_safe"]):
            side = "at or below" if p["mean_k3"] <= p["k3_safe"] else "above"
            so_far = (f" No harm measured so far up to k3 = {safe}; this run is {side} it.")
        lines.append(f"GRPO's logit-noise threshold on the register (V6) is not determined yet "
                     f"({p['reason']}); no threshold number is given.{so_far}")
    elif where == "below_safe":
        lines.append(f"below k3_safe = {safe} (GRPO, logit noise; harmed from k3_harm = {harm}): "
                     f"no harm measurable at toy scale from logit noise of this size.")
        for r in p["real_paths"]:
            if r["harmed"] is True and r["k3"] is not None and r["k3"] < p["k3_safe"]:
                lines.append(f"but the real path {r['path']} was harmed at k3 = "
                             f"{k3_text(r['k3'])}, below k3_safe: a run on that path is not safe "
                             f"by its k3 alone.")
    elif where == "between":
        lines.append(f"between k3_safe = {safe} and k3_harm = {harm} (GRPO, logit noise): not "
                     f"harmed at the first, harmed at the second; this run lies between them.")
    elif where == "at_or_above_harm":
        rem = "; ".join(_remedy(r) for r in p["remedies"]) or "none measured yet"
        at = f" (logit sigma = {p['remedies'][0]['sigma']:g})" if p["remedies"] else ""
        lines.append(f"at or above k3_harm = {harm} (GRPO, logit noise, sigma = "
                     f"{p['sigma_harm']:g}; k3_safe = {safe}): GRPO was harmed at this mismatch "
                     f"at toy scale; remedies measured there{at}: {rem}.")
    else:
        lines.append(f"above k3 = {safe}, the largest mismatch GRPO's logit-noise sweep measured, "
                     f"none of it harmed: the register has no measurement this large.")
    if where != "unavailable":
        if p["well_formed"] is False and not math.isnan(p["k3_harm"]):
            lines.append("at k3_harm the rollouts were ill-formed: the harm there is a collapse "
                         "of the answer format.")
        if p["pending"] and where != "undetermined":
            lines.append("sigmas still pending: " + ", ".join(f"{s:g}" for s in p["pending"])
                         + " (the thresholds may move).")
        real = "; ".join(f"{r['path']} {k3_text(r['k3'])} ("
                         + {True: "harmed", False: "not harmed", None: "pending"}[r["harmed"]]
                         + ")" for r in p["real_paths"])
        lines.append(f"real rollout paths on the same axis (k3): {real or 'none measured yet'}.")
        if p["missing"]:
            lines.append(f"the register is partial: {len(p['missing'])} arm(s) lack stored seeds "
                         f"({', '.join(p['missing'])}).")
    lines.append(f"caveat: {CAVEAT}")
    return lines


def register_section(d, register: list[dict] | None = None,
                     params: float | None = None) -> None:
    """Place the :class:`~tailtheory.diagnose.sections.Diagnosis` ``d`` on the register from its
    summary's ``k3``: the verdict lines under ``register``, the dict under
    ``d.points["register"]`` (written as ``register.json``), with the comparison at the model-size
    ladder's rung nearest ``params`` (:mod:`tailtheory.ladder.place`) under its
    ``ladder``. A k3 that is missing or NaN is said so and not placed."""
    k3 = d.summary.get("k3")
    if k3 is None or math.isnan(k3):
        d.verdicts["register"] = [f"mean per-token k3 is {k3}: the run cannot be placed on the "
                                  f"dose-response register.", f"caveat: {CAVEAT}"]
        return
    from tailtheory.ladder.place import ladder_lines, ladder_placement

    p = place_on_register(k3, register)
    p["ladder"] = ladder_placement(k3, params)
    d.points["register"] = p
    lines = placement_lines(p)
    d.verdicts["register"] = lines[:-1] + ladder_lines(p["ladder"]) + lines[-1:]


def register_files(d: Diagnosis) -> dict[str, str]:
    """``register.json``: the run's placement on the register, when it was placed."""
    if NAME not in d.points:
        return {}
    return {"register.json": json.dumps(json_safe(d.points[NAME]), indent=2) + "\n"}


SECTION = Section(NAME, "The run's mean k3 on the mismatch dose-response register", "V6",
                  lambda ctx, d: register_section(d, ctx.register, ctx.params),
                  files=register_files)
