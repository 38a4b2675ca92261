"""V6 along the model-size ladder: the logit-noise scale that gives a target mismatch on a rung.

The register of V6 (:mod:`tailtheory.tim.dose`) is in measured k3, not in the noise scale sigma:
the same sigma gives another k3 on another policy (a sharper policy, a larger vocabulary). To
ask whether the threshold k3* moves with size (ledger: "Does the register transfer"), each rung's
GRPO runs on logit noise must sit at the same k3 values, :data:`TARGETS`. This module finds, on a
rung's warm start, the sigma of each target: the mean per-token k3 of the first GRPO batch of the
``matched`` recipe rolled out with Gaussian logit noise at sigma (:func:`batch_k3`), with the same
random numbers at every sigma, found by bisection on ``log sigma`` (:func:`calibrate`). Stored
per rung in ``results/dose_ladder_calibration.json`` (``tailtheory ladder calibrate``).

The runs (study ``dose_ladder``, fixed in the ledger before any of them): on the ``matched``
recipe at each rung of :data:`V6_RUNGS`, ``exact`` over the recipe's 5 seeds and GRPO on
logit noise at each calibrated sigma of :data:`SIGMAS` over :data:`NOISE_SEEDS`; V6's rule per rung
(:func:`tailtheory.tim.dose.point_rows`, :func:`tailtheory.tim.dose.threshold`: harm, measured
k3, threshold, well-formed), and :func:`transfer`: k3* **moves** with size when the two rungs'
intervals ``[k3_safe, k3_harm]`` are disjoint, **stays** when they overlap, and nothing is said
without a threshold at both rungs.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tailtheory.core.estimators import k3
from tailtheory.core.measurements import StaleMeasurement
from tailtheory.core.provenance import cpu_model, weights_fingerprint
from tailtheory.engine.devices import model_generator
from tailtheory.engine.rollout.engine import RolloutEngine
from tailtheory.engine.threads import torch_threads
from tailtheory.engine.trainer import rollout_config, rollout_step, step_record
from tailtheory.experiments.comparison import Measurement
from tailtheory.ladder.build import built_names, store_rung, warm_policy
from tailtheory.experiments.learning import MATCHED_GAIN, summarize, verdict
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.presets import SEEDS, train_config
from tailtheory.experiments.study import Arm, Study, load_done, register_study
from tailtheory.tim.dose import SERIES, point_rows, threshold

TARGETS = (0.02, 0.065, 0.19, 0.5)
"""Mean per-token k3 values of the ladder's V6 grid (the ``learn`` register's unharmed 0.020 and
0.065, its harmed 0.19, and one above)."""

SIGMA_RANGE = (0.05, 16.0)
"""Bisection bracket of the logit-noise scale."""

ITERATIONS = 10
"""Bisection steps on ``log sigma`` (the bracket's ratio shrinks to 320 ** (1 / 1024))."""

CALIBRATION = "dose_ladder_calibration"


def batch_k3(model, task, cfg, sigma: float) -> float:
    """Mean per-token k3 of the first GRPO batch of ``cfg`` (seed ``cfg.seed``) rolled out with
    Gaussian logit noise at ``sigma`` (0: the float32 sampler), against the trainer."""
    c = replace(cfg, rollout="logit_noise" if sigma > 0 else "kv", rollout_noise=sigma)
    engine = RolloutEngine(model, rollout_config(c, task))
    gen = model_generator(model, c.seed)
    problems, rb, group_ids = rollout_step(0, c, task, model, engine, gen)
    rewards = [task.reward(problems[i // c.group_size], rb.response[i])
               for i in range(rb.response.shape[0])]
    b = step_record(model, rb, rewards, group_ids, c, 0, live=False).b
    return float((k3(b.log_rho.double()) * b.mask).sum() / b.mask.sum())


def calibrate(k3_of, target: float, lo: float = SIGMA_RANGE[0], hi: float = SIGMA_RANGE[1],
              iterations: int = ITERATIONS) -> tuple[float, float]:
    """``(sigma, k3)``: bisection on ``log sigma`` for the sigma whose ``k3_of(sigma)`` is
    ``target`` (``k3_of`` increasing); a target outside the bracket's k3 range is a
    ``ValueError`` naming both ends."""
    k_lo, k_hi = k3_of(lo), k3_of(hi)
    if not k_lo <= target <= k_hi:
        raise ValueError(f"k3 {target:g} lies outside [{k_lo:.3g}, {k_hi:.3g}], the k3 of sigma "
                         f"{lo:g} and {hi:g}")
    best = (lo, k_lo) if abs(k_lo - target) < abs(k_hi - target) else (hi, k_hi)
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        k = k3_of(mid)
        if abs(k - target) < abs(best[1] - target):
            best = (mid, k)
        lo, hi = (mid, hi) if k < target else (lo, mid)
    return best


def noise_calibration_config() -> dict:
    """What ``results/dose_ladder_calibration.json`` is keyed by: the targets and the bisection."""
    return {"targets": list(TARGETS), "range": list(SIGMA_RANGE), "iterations": ITERATIONS,
            "batch": "matched, seed 1, step 0"}


def measure_noise_sigmas(names: list[str] | None = None, threads: int = 1) -> dict:
    """The sigma of each of :data:`TARGETS` on the warm starts of the built rungs ``names``
    (default: every built rung), stored per rung as each finishes with the warm start's key and
    fingerprint and the CPU. Nothing is trained."""
    out = {}
    for name in built_names(names):
        cfg = replace(train_config("matched"), rung=name, seed=1)
        model, task, warm = warm_policy(name, cfg)
        cache: dict[float, float] = {}

        def k3_of(sigma: float) -> float:
            if sigma not in cache:
                cache[sigma] = batch_k3(model, task, cfg, sigma)
            return cache[sigma]

        with torch_threads(threads):
            points = {str(t): dict(zip(("sigma", "k3"), calibrate(k3_of, t))) for t in TARGETS}
        out[name] = {"targets": points, "evaluated": {f"{s:.6g}": k for s, k in
                                                     sorted(cache.items())},
                     "warm_key": warm.name, "weights": weights_fingerprint(model.float()),
                     "cpu": cpu_model()}
        store_rung(CALIBRATION, name, out[name], noise_calibration_config(),
                   measure_command(CALIBRATION))
    return out


V6_RUNGS = ("base", "w256")
"""The rungs of V6 along the ladder: the base and the first built rung with at least 4x its
non-embedding parameters (``w256``, 8.0x)."""

SIGMAS = {"base": (0.4524, 0.8550, 1.4934, 2.1057), "w256": (0.4627, 0.8944, 1.5622, 2.1537)}
"""Rung -> the logit-noise sigma of each of :data:`TARGETS`, as :func:`measure_noise_sigmas`
stored them (``results/dose_ladder_calibration.json``, rounded to 4 digits; a test holds the two
together). A rung's noise arms exist once its sigmas are written here."""

NOISE_SEEDS = (1, 2, 3)
"""Seeds of every noise point (``exact`` has the recipe's five)."""


def ladder_dose_arms(preset: str) -> list[Arm]:
    """The study's arms (preset ``matched`` only), tagged ``rung``, ``kind`` (exact, logit),
    ``sigma``, ``k3_target`` and ``role`` (baseline, dose), per rung of :data:`V6_RUNGS`."""
    if preset != "matched":
        raise ValueError(f"V6 along the ladder runs on the matched preset, not {preset!r}")
    arms = []
    for name in V6_RUNGS:
        base = replace(train_config("matched"), rung=name)
        tags = {"rung": name, "method": "grpo", "path": base.rollout, "pi_old": "recompute"}
        arms.append(Arm(f"{name} | GRPO | exact", tuple(replace(base, seed=s) for s in
                                                        SEEDS["matched"]),
                        {**tags, "kind": "exact", "sigma": 0.0, "k3_target": 0.0,
                         "role": "baseline"}))
        for target, sigma in zip(TARGETS, SIGMAS.get(name, ())):
            arms.append(Arm(f"{name} | GRPO | logit k3={target:g}",
                            tuple(replace(base, seed=s, rollout="logit_noise",
                                          rollout_noise=sigma) for s in NOISE_SEEDS),
                            {**tags, "kind": "logit", "sigma": sigma, "path": "logit_noise",
                             "k3_target": target, "role": "dose"}))
    return arms


STUDY = register_study(Study("dose_ladder", ladder_dose_arms, series=SERIES,
                             measure_preset="matched"))
"""``results/dose_ladder.json``: each run's summary and curves (``tailtheory study
dose_ladder`` trains what the run cache lacks and stores it run by run)."""


def rung_thresholds(data) -> dict[str, dict]:
    """Rung -> V6's rows of its arms (``rows``), GRPO's logit-noise :func:`threshold`
    (``threshold``) and whether its ``exact`` arm learns by the recipe's rule (``learns``, with
    ``learns_reason``; None while it has no run), for the rungs with any stored run."""
    m = STUDY.measurement(data)
    out = {}
    for name in V6_RUNGS:
        labels = m.labels(rung=name)
        if not labels:
            continue
        ref = f"{name} | GRPO | exact"
        rows = point_rows(m, ref, labels)
        n = len(m[ref]) if ref in m else 0
        word, why = (verdict([summarize(r) for r in m[ref]], MATCHED_GAIN)
                     if n == len(SEEDS["matched"])
                     else (None, f"{n} of {len(SEEDS['matched'])} exact runs stored"))
        learns = None if word is None else word == "LEARNS"
        out[name] = {"rows": rows, "learns": learns, "learns_reason": why,
                     "threshold": threshold([r for r in rows if r["kind"] == "logit"])}
    return out


def _status(t: dict | None) -> str:
    """One rung's state: ``threshold`` (a monotone harm among compared points), ``pending``
    (points or the baseline not compared yet), ``none`` (all compared: no threshold)."""
    if not t or t["learns"] is None:
        return "pending"
    if not t["learns"]:
        return "none"
    th = t["threshold"]
    compared = [r for r in t["rows"] if r["kind"] == "logit" and r["harmed"] is not None]
    if th["pending"] or len(compared) < len(TARGETS):
        return "pending"
    return "threshold" if not math.isnan(th["k3_harm"]) and th["monotone"] else "none"


def transfer(thresholds: dict[str, dict]) -> dict:
    """Whether k3* moves between the rungs of :data:`V6_RUNGS` (the module docstring's rule):
    ``verdict`` MOVES, STAYS, UNDETERMINED (a rung without a threshold, or whose ``exact`` does
    not learn: nothing is said) or PENDING, with its ``reason``; ``intervals``: rung ->
    ``(low, high)``, the k3 range the threshold lies in (``low`` 0 where the smallest point is
    already harmed)."""
    status = {n: _status(thresholds.get(n)) for n in V6_RUNGS}
    intervals = {}
    for n in V6_RUNGS:
        if status[n] == "threshold":
            th = thresholds[n]["threshold"]
            intervals[n] = (0.0 if math.isnan(th["k3_safe"]) else th["k3_safe"], th["k3_harm"])
    if "pending" in status.values():
        waiting = [n for n, s in status.items() if s == "pending"]
        return {"verdict": "PENDING", "intervals": intervals,
                "reason": f"runs still missing at {', '.join(waiting)}"}
    if "none" in status.values():
        bare = [n for n, s in status.items() if s == "none"]
        return {"verdict": "UNDETERMINED", "intervals": intervals,
                "reason": f"no threshold at {', '.join(bare)} (no monotone harm, or exact does "
                          "not learn): nothing is said about a move"}
    (a_lo, a_hi), (b_lo, b_hi) = (intervals[n] for n in V6_RUNGS)
    disjoint = a_hi < b_lo or b_hi < a_lo
    return {"verdict": "MOVES" if disjoint else "STAYS", "intervals": intervals, "reason": ""}


def stored_transfer() -> dict:
    """:func:`transfer` of the stored study with its runs still missing (``missing``: arm label
    -> seeds, ``runs``, ``of``) and the command that trains them; nothing is trained here."""
    try:
        m = load_done(STUDY)
    except StaleMeasurement:
        m = Measurement({}, study=STUDY.name)
    plan = STUDY.plan(STUDY.measure_preset)
    missing = {a.label: sorted(m.missing.get(a.label, [c.seed for c in a.configs]))
               for a in plan if a.label not in m or m.missing.get(a.label)}
    out = transfer(rung_thresholds(m))
    runs = sum(len(v) for v in missing.values())
    of = sum(len(a.configs) for a in plan)
    if out["verdict"] == "PENDING":
        bare = [n for n in V6_RUNGS if n not in SIGMAS]
        out["verdict"] = (f"PENDING ({runs} of {of} runs missing: {STUDY.command}" + "".join(
            f"; {n}'s noise sigmas not calibrated: tailtheory ladder calibrate --rung {n}"
            for n in bare) + ")")
    return {**out, "missing": missing, "runs": runs, "of": of}


CALIBRATION_MEASURE = register_measure(Measure(
    CALIBRATION, "V6 along the ladder: the logit-noise sigma of each target k3 on every built "
    "rung's warm start", f"not recorded; up to {2 + ITERATIONS} rollouts of one GRPO batch for "
    f"each of {len(TARGETS)} targets a rung", noise_calibration_config,
    lambda: measure_noise_sigmas(), resume="parts"))
