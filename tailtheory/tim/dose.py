"""Mismatch dose-response (claim V6): how much rollout mismatch GRPO survives on the learning
testbed, where the remedies move that threshold, and where the real rollout paths sit.

Beyond the papers: TIM (Zhong et al., arXiv 2605.14220) compares one mismatched engine with none;
DVP (Li et al., arXiv 2512.23087) models the mismatch as i.i.d. noise on the logits. Here the
mismatch is set by hand (:mod:`tailtheory.engine.rollout.noise`, the trainer untouched, held-out accuracy
always sampled noise-free from the trainer's weights) and swept on the ``learn`` recipe:

- ``exact``: GRPO with zero mismatch, the recipe's five seeds (the very runs of the LOPTI study's
  GRPO arm: same configs, same run keys);
- GRPO on ``logit_noise`` at :data:`LOGIT_SIGMAS` and on ``weight_noise`` at
  :data:`WEIGHT_SIGMAS`, :data:`DOSE_SEEDS` each;
- the real paths of :data:`REAL_PATHS` (a separate float32 inference engine, bf16, fp16, fp8
  weights; fp8 also with ``pi_old`` from the rollout), placed on the same axis;
- the remedies of :data:`REMEDIES` on ``logit_noise`` at :data:`REMEDY_SIGMA`.

Rule, fixed before measuring (``results/mismatch_dose.json``; the ledger repeats it):

- a point (method, noise kind, sigma) is **harmed** when the ``exact`` runs' final held-out
  accuracy (mean of the last 2 evaluations) exceeds the point's by more than 2 standard errors
  over seeds (:meth:`Measurement.compare`); a point with fewer than :data:`MIN_SEEDS` stored
  seeds is pending and decides nothing;
- its mismatch is the **measured** k3: the mean of ``mismatch/k3`` over a run's steps, averaged
  over its seeds (never sigma);
- a method's **threshold** on a noise kind lies between ``k3_safe``, the largest k3 of an
  unharmed point below its first harmed point, and ``k3_harm``, that first harmed point's k3;
  the harm counts as a threshold only when every larger sigma is harmed too;
- a point is **well-formed** when the mean ``reward/format`` of its rollouts is at least
  :data:`WELL_FORMED`;
- **V6** ``TOY-SCALE`` when GRPO's logit-noise sweep has a threshold at a well-formed point;
  ``NOT-REPRODUCED`` when no well-formed point is harmed (or harm is not monotone in sigma).
- the remedies run at :data:`REMEDY_SIGMA`: first chosen by a screen (the smallest grid sigma
  whose seed-1 GRPO run ended below the lowest of the five ``exact`` runs), amended before any
  remedy ran to the smallest sigma the rule above finds harmed (the screen's pick was not).
  A remedy **moves the threshold** when it is not harmed there: GRPO's ``k3_harm`` is then
  inside its safe range.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tailtheory.core.registry import LEARN_DECODER, Evidence, Verdict
from tailtheory.experiments.comparison import mean_se
from tailtheory.experiments.presets import SEEDS, train_config
from tailtheory.experiments.run_numbers import FINAL_WINDOW, window_means
from tailtheory.experiments.study import Arm, Study, register_study

LOGIT_SIGMAS = (0.3, 1.0, 1.5, 2.0, 4.0)
"""Standard deviations of the logit noise: k3 of about 2e-3 (0.3) to collapse (a 40-step pilot
of one seed measured mean k3 2.4e-4, 2.2e-3 and 2.8e-2 at 0.1, 0.3 and 1, all still learning).
The grid first ended at 8; at 4 the first seed's rollouts were already ill-formed (mean
``reward/format`` 0), so 8, which could decide nothing, was replaced by 1.5 before it ran."""

WEIGHT_SIGMAS = (0.1, 0.3, 1.0)
"""Relative standard deviations of the weight noise (at 0.3 the pilot's k3 was 3.1e-2)."""

DOSE_SEEDS = (1, 2, 3)
"""Seeds of every swept point, real path and remedy (the ``exact`` arm has the recipe's five)."""

SCREEN_SEEDS = (1,)
"""Seeds of the screened points: run at seed 1 only, so pending in every rule (fewer than
:data:`MIN_SEEDS`); drawn, never compared."""

SCREENED = (("logit", 4.0), ("kv", "recompute"), ("fp16", "recompute"))
"""The screened points: logit noise at sigma 4 (its seed-1 rollouts were ill-formed, mean
``reward/format`` 0) and the ``kv`` and ``fp16`` real paths (their seed-1 runs placed them on the
axis; their other seeds were not run)."""

PATH_SEEDS = (1, 2, 3, 4, 5)
"""Seeds of the bf16 and fp8 paths (the recipe's five, as V3-V5 ask; their first three runs are
the ones first stored with :data:`DOSE_SEEDS`, the same configs)."""

FIVE_SEED_PATHS = ("bf16", "fp8")
"""The real paths run over :data:`PATH_SEEDS`; the others (kv, fp16) over :data:`DOSE_SEEDS`."""

MIN_SEEDS = 3
"""Seeds a point needs before it is compared."""

REAL_PATHS = (("kv", "recompute"), ("bf16", "recompute"), ("fp16", "recompute"),
              ("fp8", "recompute"), ("fp8", "bypass"))
"""The real rollout paths placed on the dose axis (``path``, ``pi_old``). Their runs dump their
tokens (``dump_tokens``, part of the run key), so that TIM's V3 and TRM's T14 on the learning
testbed can read the same runs."""

REMEDIES = {"TIS": "tis", "MIS": "mis", "IcePop": "icepop", "TRM": "trm", "DVP": "dvp",
            "seq-TIS": "seq_tis", "geo-reject": "geo_reject"}
"""Remedies at their engine defaults (token TIS cap 2, MIS band [0.5, 2], IcePop band [0.5, 2],
TRM max-KL 0.05, DVP min-p 1e-6, sequence TIS cap 2, geometric rejection band; ``tailtheory
methods``). Sequence TIS and geometric rejection were added after the first five had run, before
any of their own runs, so that every remedy of the V4 study is measured at the harmful dose."""

REMEDY_SIGMA = 2.0
"""The logit-noise sigma the remedies run at. The screen of the module docstring picked 1 (the
five ``exact`` runs ended at final held-out accuracy 0.627-0.639, the seed-1 GRPO runs at sigma
0.3 and 1 at 0.648 and 0.590); GRPO's three seeds at 1 then showed no harm (0.590, 0.652, 0.637:
gap 0.008, se 0.019), so a remedy there could not move a threshold. Amended before any remedy
ran: the remedies run at the smallest sigma the full rule finds harmed, 2 (1.5: gap 0.036, se
0.018, 1.99 se, not harmed; 2: gap 0.348, se 0.003)."""

WELL_FORMED = 0.5
"""Mean ``reward/format`` at or above which a point's rollouts count as well-formed."""

SERIES = {"k3": "mismatch/k3", "k1": "mismatch/k1", "format": "reward/format"}
"""Per-step series kept of every run."""


def _label(method: str, kind: str, sigma: float = 0.0) -> str:
    return f"{method} | {kind}" + (f" sigma={sigma:g}" if sigma else "")


def dose_arms(preset: str) -> list[Arm]:
    """The arms of the module docstring (preset ``learn`` only: the sweep is defined on the
    learning testbed). Tags: ``method``, ``kind`` (exact, logit, weight, real), ``sigma``,
    ``path``, ``pi_old``, ``role`` (baseline, dose, real, remedy)."""
    if preset != "learn":
        raise ValueError(f"the dose-response study runs on the learn preset, not {preset!r}")
    base = train_config("learn")

    def arm(label, tags, seeds=DOSE_SEEDS, **over):
        cfgs = tuple(replace(base, **over, seed=s) for s in seeds)
        full = {"method": "grpo", "kind": "exact", "sigma": 0.0, "path": base.rollout,
                "pi_old": "recompute", **tags}
        return Arm(label, cfgs, full)

    arms = [arm("GRPO | exact", {"role": "baseline"}, seeds=SEEDS["learn"])]
    for kind, path, sigmas in (("logit", "logit_noise", LOGIT_SIGMAS),
                               ("weight", "weight_noise", WEIGHT_SIGMAS)):
        arms += [arm(_label("GRPO", kind, s), {"kind": kind, "sigma": s, "path": path,
                                               "role": "dose"}, rollout=path, rollout_noise=s,
                     seeds=SCREEN_SEEDS if (kind, s) in SCREENED else DOSE_SEEDS)
                 for s in sigmas]
    arms += [arm(_label("GRPO", f"{p} {m}"), {"kind": "real", "path": p, "pi_old": m,
                                              "role": "real"}, rollout=p, pi_old=m,
                 dump_tokens=True, seeds=PATH_SEEDS if p in FIVE_SEED_PATHS else
                 SCREEN_SEEDS if (p, m) in SCREENED else DOSE_SEEDS)
             for p, m in REAL_PATHS]
    arms += [arm(_label(name, "logit", REMEDY_SIGMA),
                 {"method": method, "kind": "logit", "sigma": REMEDY_SIGMA, "path": "logit_noise",
                  "role": "remedy"}, method=method, rollout="logit_noise",
                 rollout_noise=REMEDY_SIGMA) for name, method in REMEDIES.items()]
    return arms


STUDY = register_study(Study("mismatch_dose", dose_arms, series=SERIES))
"""V6: stored run by run in ``results/mismatch_dose.json`` (``tailtheory study mismatch_dose``)."""


def _k3(rows) -> float:
    return sum(sum(r["k3"]) / len(r["k3"]) for r in rows) / len(rows)


def dose_table(data) -> list[dict]:
    """One row per measured arm: its tags, seeds, measured k3 (seed mean of the run means; its
    lowest and highest run), well-formedness, final held-out accuracy (mean, se) and the gap
    below ``exact`` with its standard error and whether it is harmed (``None``: pending)."""
    m = STUDY.measurement(data)
    return point_rows(m, m.label(role="baseline"), list(m))


def point_rows(m, ref: str, labels: list[str]) -> list[dict]:
    """:func:`dose_table`'s rows of the arms ``labels`` of the measurement ``m``, each compared
    with the baseline arm ``ref`` by V6's rule (a study with one baseline per group of arms, as
    the model-size ladder's, calls it once per group)."""
    out = []
    for label in labels:
        rows, tags = m[label], m.tags.get(label, {})
        k3s = [sum(r["k3"]) / len(r["k3"]) for r in rows]
        acc, se = mean_se([r["final_eval"] for r in rows])
        row = {"label": label, **{k: tags.get(k) for k in ("method", "kind", "sigma", "path",
                                                              "pi_old", "role")},
               "seeds": len(rows), "k3": sum(k3s) / len(k3s), "k3_min": min(k3s),
               "k3_max": max(k3s),
               "format": sum(sum(r["format"]) / len(r["format"]) for r in rows) / len(rows),
               "final_eval": acc, "final_eval_se": se,
               "final_reward": mean_se([r["final_reward"] for r in rows])[0],
               "gap": math.nan, "gap_se": math.nan, "harmed": None}
        if label != ref and ref in m and len(rows) >= MIN_SEEDS:
            c = m.compare(ref, label, "final_eval")
            row.update(gap=c.delta, gap_se=c.se, harmed=c.verdict == Verdict.TOY_SCALE)
        row["well_formed"] = row["format"] >= WELL_FORMED
        out.append(row)
    return out


def threshold(rows: list[dict]) -> dict:
    """The threshold of one method on one noise kind from its :func:`dose_table` rows: ``k3_safe``
    (largest k3 of an unharmed point below the first harmed one; NaN if none), ``k3_harm`` (the
    first harmed point's k3; NaN if none), ``sigma_harm``, ``monotone`` (every larger sigma
    harmed), ``pending`` (sigmas not compared yet) and ``well_formed`` (of the first harmed)."""
    done = sorted((r for r in rows if r["harmed"] is not None), key=lambda r: r["sigma"])
    pending = sorted(r["sigma"] for r in rows if r["harmed"] is None)
    first = next((i for i, r in enumerate(done) if r["harmed"]), None)
    if first is None:
        safe = max((r["k3"] for r in done), default=math.nan)
        return {"k3_safe": safe, "k3_harm": math.nan, "sigma_harm": math.nan,
                "monotone": True, "pending": pending, "well_formed": None}
    below = [r["k3"] for r in done[:first]]
    return {"k3_safe": max(below) if below else math.nan, "k3_harm": done[first]["k3"],
            "sigma_harm": done[first]["sigma"],
            "monotone": all(r["harmed"] for r in done[first:]), "pending": pending,
            "well_formed": done[first]["well_formed"]}


def register_table(data) -> list[dict]:
    """The register a user acts on: per (method, noise kind) its :func:`threshold`, the remedies'
    status at :data:`REMEDY_SIGMA`, and each real path's measured k3 and harm."""
    rows = dose_table(data)
    out = []
    for kind in ("logit", "weight"):
        grpo = [r for r in rows if r["method"] == "grpo" and r["kind"] == kind]
        if grpo:
            out.append({"method": "grpo", "kind": kind, **threshold(grpo)})
    for r in rows:
        if r["role"] == "remedy":
            harmed = r["harmed"]
            out.append({"method": r["method"], "kind": r["kind"], "sigma": r["sigma"],
                        "k3": r["k3"], "harmed": harmed,
                        "moves_threshold": None if harmed is None else not harmed})
        elif r["role"] == "real":
            out.append({"method": "grpo", "kind": f"{r['path']} {r['pi_old']}", "k3": r["k3"],
                        "harmed": r["harmed"], "seeds": r["seeds"]})
    return out


def v6_evidence(data) -> Evidence:
    """V6 from the stored runs (rule in the module docstring)."""
    m = STUDY.measurement(data)
    rows = dose_table(m)
    nums: dict = {"measured on": "learn recipe", "rollout decoder": LEARN_DECODER}
    for r in rows:
        key = r["label"]
        nums[f"{key}:k3"] = r["k3"]
        nums[f"{key}:final_eval"] = r["final_eval"]
        nums[f"{key}:seeds"] = r["seeds"]
        if r["harmed"] is not None:
            nums[f"{key}:gap"], nums[f"{key}:gap_se"] = r["gap"], r["gap_se"]
    grpo = [r for r in rows if r["method"] == "grpo" and r["kind"] == "logit"]
    t = threshold(grpo)
    nums.update({f"logit:{k}": v for k, v in t.items() if k != "pending"})
    nums["logit:pending_sigmas"] = ", ".join(f"{s:g}" for s in t["pending"]) or "none"
    found = not math.isnan(t["k3_harm"]) and t["monotone"] and t["well_formed"]
    if t["pending"] and not found:
        note = "pending: GRPO's logit-noise sweep lacks seeds at sigma " + nums[
            "logit:pending_sigmas"]
    else:
        note = ""
    verdict = Verdict.TOY_SCALE if found else Verdict.NOT_REPRODUCED
    rule = ("criterion: GRPO's final held-out accuracy below exact's by > 2 se at some "
            "well-formed logit-noise sigma and at every larger one (threshold between the "
            "measured k3 of the last unharmed and the first harmed point)")
    return Evidence(verdict, nums, "; ".join(x for x in (rule, note) if x),
                    key=("logit:k3_safe", "logit:k3_harm", "logit:sigma_harm", "logit:monotone"))


def _k(x: float) -> str:
    return "not measured yet" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2g}"


def register_text(data) -> list[str]:
    """The register in words, one line per finding: GRPO's thresholds per noise kind, each
    remedy at :data:`REMEDY_SIGMA`, and where the real paths sit. Only measured numbers are
    named; what is pending is said to be."""
    lines = []
    for r in register_table(data):
        if r["method"] == "grpo" and r["kind"] in ("logit", "weight"):
            pend = f" (sigmas still pending: {', '.join(f'{s:g}' for s in r['pending'])})" \
                if r["pending"] else ""
            if math.isnan(r["k3_harm"]):
                lines.append(f"GRPO, {r['kind']} noise: no harm measured up to k3 = "
                             f"{_k(r['k3_safe'])}{pend}")
            else:
                shape = "" if r["monotone"] else "; harm is not monotone in sigma (no threshold)"
                lines.append(f"GRPO, {r['kind']} noise: no harm measurable below k3 = "
                             f"{_k(r['k3_safe'])}; harmed from k3 = {_k(r['k3_harm'])} "
                             f"(sigma = {r['sigma_harm']:g}){shape}{pend}")
        elif "moves_threshold" in r:
            state = {None: "pending (fewer than 3 seeds)", True: "not harmed: moves the threshold",
                     False: "harmed: does not move the threshold"}[r["moves_threshold"]]
            lines.append(f"{r['method']} at {r['kind']} sigma = {r['sigma']:g} "
                         f"(k3 = {_k(r['k3'])}): {state}")
        else:
            state = {None: "pending", True: "harmed", False: "not harmed"}[r["harmed"]]
            lines.append(f"real path {r['kind']}: k3 = {_k(r['k3'])} ({r['seeds']} seeds; {state})")
    lines += harmed_below_threshold(data)
    return lines


def harmed_below_threshold(data) -> list[str]:
    """Lines naming each real path harmed at a k3 below GRPO's logit-noise ``k3_safe``: there the
    register's "no harm measurable below k3_safe" does not hold for that path (a bypass path,
    for one, also carries the mismatch into the PPO ratio, which k3 does not measure)."""
    rows = register_table(data)
    logit = next((r for r in rows if r["method"] == "grpo" and r["kind"] == "logit"), None)
    if logit is None or math.isnan(logit["k3_safe"]):
        return []
    return [f"but real path {r['kind']} was harmed at k3 = {_k(r['k3'])}, below k3_safe = "
            f"{_k(logit['k3_safe'])}: k3 alone does not place a run of that path"
            for r in rows if r.get("harmed") is True and "seeds" in r
            and r["k3"] < logit["k3_safe"]]


def real_path_evidence(data) -> tuple[Evidence, Evidence]:
    """V4 and V5 on the learning testbed, from this study's real-path arms against ``exact``
    (rules in the ledger: V4 harmed = final reward below exact's by > 2 se; V5 flat = mean k3 of
    the last 10 steps within x2 of the first 10, over V4's harmed paths); a path with fewer than
    :data:`MIN_SEEDS` seeds is pending. The harmed logit-noise points' k3 ratios are reported
    beside V5, not counted."""
    m = STUDY.measurement(data)
    ref = m.label(role="baseline")
    names = {lb: f"{m.tags[lb]['path']} {m.tags[lb]['pi_old']}" for lb in m.labels(role="real")}
    real = [lb for lb in names if len(m[lb]) >= MIN_SEEDS]
    v4, v5, harmed, flat = {}, {}, [], []
    for lb in real:
        name = names[lb]
        r, e = m.compare(ref, lb, "final_reward"), m.compare(ref, lb, "final_eval")
        v4.update({f"{name}:gap_reward": r.delta, f"{name}:se": r.se,
                   f"{name}:gap_heldout": e.delta, f"{name}:se_heldout": e.se,
                   f"{name}:seeds": len(m[lb]), f"{name}:k3": _k3(m[lb])})
        first, last = window_means(m[lb], "k3", FINAL_WINDOW)
        v5.update({f"{name}:k3_first": first, f"{name}:k3_final": last})
        if r.verdict == Verdict.TOY_SCALE:
            harmed.append(name)
            flat.append(1 / 2 <= (last / first if first > 0 else math.inf) <= 2)
    v4["harmed"] = v5["harmed"] = ", ".join(harmed) or "none"
    v4["exact:final_reward"] = m.mean(ref, "final_reward")
    pending = [names[lb] for lb in names if lb not in real]
    v4["pending"] = ", ".join(pending) or "none"
    for r in dose_table(m):
        if r["role"] == "dose" and r["harmed"]:
            first, last = window_means(m[r["label"]], "k3", FINAL_WINDOW)
            v5[f"{r['label']}:k3_ratio (not counted)"] = last / first if first else math.nan
    worst_gap = max(real, key=lambda lb: v4[f"{names[lb]}:gap_reward"], default=None)
    ev4 = Evidence(Verdict.TOY_SCALE if harmed else Verdict.NOT_REPRODUCED, v4,
                   "learn recipe: some real path's final reward (last 10 steps) below exact's by "
                   "> 2 se over seeds",
                   key=("harmed",) + ((f"{names[worst_gap]}:gap_reward", f"{names[worst_gap]}:se")
                                      if worst_gap else ()) + ("pending",))
    v5_verdict = (Verdict.NOT_REPRODUCED if not flat else
                  Verdict.TOY_SCALE if any(flat) else Verdict.REFUTED)
    ev5 = Evidence(v5_verdict, v5, "learn recipe: a real path V4 finds harmed keeps its mean k3 "
                   "over the last 10 steps within x2 of the first 10 (none harmed: NOT-REPRODUCED)",
                   key=("harmed",))
    return ev4, ev5
