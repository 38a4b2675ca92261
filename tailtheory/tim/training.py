"""Mismatch in training (claims V3, V4, V5): identical GRPO runs that differ only in the rollout
path, under both ways of getting ``pi_old``, then TIM's remedies from the same start.

Source: TIM (Zhong et al., arXiv 2605.14220; VeXact): a small token-level disagreement between
rollout and trainer can, by itself, destabilise RL; the remedies weigh or mask by
``rho = pi_train / pi_roll`` (``tailtheory methods``). Task ``kk_trace`` (responses of ~100
tokens) from the full preset's warm start; rollout paths ``exact`` (V1: zero mismatch), ``bf16``
and ``fp8`` (e4m3 weights, bf16 compute); ``pi_old`` by ``recompute`` or ``bypass``.

The plan (:func:`v_plan`), fixed before measuring:

- main regime (lr 2e-4, temperature 1, :data:`MAIN_STEPS` steps): every path under both
  ``pi_old`` modes. The
  ``exact`` path gives bitwise the same run under both modes (V1), so ``exact bypass`` runs
  :data:`EXACT_BYPASS_STEPS` steps only, to show it;
- knobs searched for harm (:data:`KNOBS`): a 5x learning rate, temperature 0.5 and 40 steps,
  each with ``exact recompute`` against ``fp8 bypass`` (the lowest precision, with the mismatch
  inside the PPO ratio); temperature and length were added after the first measurement showed
  no harm, as further places to look (the verdict rule did not change);
- the remedies (:data:`REMEDIES`) on :data:`REMEDY_BASE` = ``fp8 bypass``, chosen before
  measuring as the configuration expected to hurt most (the largest mismatch, and the only
  mode in which it enters the PPO ratio), for :data:`REMEDY_STEPS` steps and the seeds of
  :data:`REMEDY_SEEDS`.

Steps are 20, not the full preset's 40, so that the plan fits its CPU budget (about 50 minutes
on two shared cores); 20 is the least that keeps the first and the final 10-step windows apart.

Runs on the main paths dump their tokens (``dump_tokens``), from which V3's contribution
``C = -(r - 1) A`` and TRM's acceptance against length (T14, :mod:`tailtheory.trm.training`)
are computed; ``r = pi_new / pi_old`` at the step's update, which runs at ``pi_old``'s weights,
so ``r = pi_train / pi_old``: exactly 1 under recompute, ``rho`` under bypass.

Verdicts (fixed before measuring; ``compare`` is :func:`tailtheory.lopti.training.compare`,
the 2-standard-error rule over seeds on final reward, the mean of the last 10 steps):

- **V3** ``TOY-SCALE`` when (a) at zero mismatch both modes coincide: ``exact bypass``'s reward
  lines equal ``exact recompute``'s bitwise and ``max |C| = 0`` in both; (b) under recompute
  ``C = 0`` at every update of every mismatch run (``|loss/ratio_mean - 1| < 1e-9``, no clipped
  token); (c) under bypass ``C`` skews by the sign of ``A`` on ``bf16`` and ``fp8``:
  ``skew = P(C > 0 | A > 0) - P(C > 0 | A < 0)`` (over tokens with ``C != 0``) is positive in
  every seed and its seed mean exceeds 2 standard errors. ``REFUTED`` when (a) fails or the
  skew is negative by 2 se; else ``NOT-REPRODUCED``.
- **V4** ``TOY-SCALE`` when some mismatch configuration trains worse than its ``exact
  recompute`` counterpart at the same knob (``compare(exact, mismatch)`` is TOY-SCALE on final
  reward); else ``NOT-REPRODUCED`` with every gap (mismatch that trains better does not refute
  "can destabilise"). The remedies are reported against GRPO on the base and against exact.
- **V5** among the configurations V4 finds harmed, ``TOY-SCALE`` when one keeps its mismatch KL
  flat: the seed mean of ``mismatch/k3`` over the last 10 steps within a factor
  :data:`FLAT` of that over the first 10; ``REFUTED`` when every harmed configuration's k3 rises
  by more than that; ``NOT-REPRODUCED`` when none is harmed.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict

PATHS = ("exact", "bf16", "fp8")
"""Rollout paths of the comparison (fp16 sits between bf16 and exact: cut for time)."""

MODES = ("recompute", "bypass")
"""``pi_old`` modes (TIM, V3)."""

MAIN_STEPS = 20
"""Steps of the main-regime runs (half the full preset's 40: the CPU budget)."""

EXACT_BYPASS_STEPS = 10
"""``exact bypass`` is bitwise ``exact recompute`` (V1); this many steps show it."""

KNOBS = {"lr=1e-3": ({"lr": 1e-3}, 20, (("exact", "recompute"), ("bf16", "recompute"),
                                        ("fp8", "bypass"))),
         "T=0.5": ({"temperature": 0.5}, 20, (("exact", "recompute"), ("fp8", "bypass"))),
         "steps=40": ({}, 40, (("exact", "recompute"), ("fp8", "bypass")))}
"""Knobs searched for a harmful regime: overrides, steps, and the (path, mode) pairs run at
each: zero mismatch against the largest one (fp8 bypass). lr 1e-3 is 5x the main one (GRPO at
it, bf16 rollouts, collapsed within 10 steps in notebook 04's runs, reused here); temperature
0.5 samples a sharper policy (every logit difference doubled), so sampled tokens sit nearer
p = 1 and the rare tail token is rarer and more extreme; ``steps=40`` continues the main runs
(the same configs, token dumps included) to the full preset's 40 steps, for harm that needs
time to build up."""

DUMPED = (("exact", "recompute"), ("exact", "bypass"), ("bf16", "bypass"), ("fp8", "recompute"),
          ("fp8", "bypass"))
"""Main-regime runs that dump their tokens (V3, T14); ``bf16 recompute`` is notebook 04's
cached GRPO run, reused as it is."""

REMEDIES = {"TIS": "tis", "seq-TIS": "seq_tis", "MIS": "mis", "geo-reject": "geo_reject",
            "IcePop": "icepop", "TRM": "trm", "DVP": "dvp"}
"""TIM's remedies with their sources' semantics (``tailtheory methods``), at the engine's
default constants (token TIS cap 2, sequence TIS cap 2, MIS band [0.5, 2], geometric band
[0.999, 1.001], IcePop band [0.5, 2], TRM max-KL 0.05, DVP min-p 1e-6)."""

REMEDY_BASE = "fp8 bypass"
"""The configuration the remedies run on (chosen before measuring, module docstring)."""

REMEDY_STEPS = 20
"""Steps of the remedy runs; GRPO on the base is read at as many."""

REMEDY_SEEDS = 2
"""The remedies run on the first two seeds of the preset (the CPU budget); GRPO and exact on
the base are compared on the same seeds."""

FINAL_WINDOW = 10
"""Steps averaged into a run's first and final reward (as ``tailtheory.lopti.training``)."""

FLAT = 2.0
"""V5: the mismatch KL counts as flat when its final-window mean is within this factor of its
first-window mean."""

RATIO_ATOL = 1e-9
"""V3 (b): ``|loss/ratio_mean - 1|`` below this counts as ``r = 1``."""


def _label(path: str, mode: str, knob: str = "") -> str:
    return f"{path} {mode}" + (f" {knob}" if knob else "")


def _knob_of(label: str) -> str:
    parts = label.split(" ")
    return parts[2] if len(parts) > 2 else ""


def v_plan(preset: str, remedies: bool = True) -> dict[str, list]:
    """Label -> configs (one per seed): the paths, the knobs and (``remedies``) the remedies."""
    from tailtheory.engine.presets import SEEDS, train_config

    base, seeds = train_config(preset), SEEDS[preset]
    steps = base.steps if preset != "full" else MAIN_STEPS
    plan = {}
    for path in PATHS:
        for mode in MODES:
            n = min(EXACT_BYPASS_STEPS, steps) if (path, mode) == ("exact", "bypass") else steps
            plan[_label(path, mode)] = [replace(base, rollout=path, pi_old=mode, steps=n, seed=s,
                                                dump_tokens=(path, mode) in DUMPED)
                                        for s in seeds]
    for knob, (over, n, pairs) in KNOBS.items():
        for path, mode in pairs:
            plan[_label(path, mode, knob)] = [
                replace(base, rollout=path, pi_old=mode, seed=s,
                        steps=n if preset == "full" else min(n, base.steps),
                        dump_tokens=not over and (path, mode) in DUMPED, **over)
                for s in seeds]
    if remedies:
        plan.update(remedy_plan(plan, min(REMEDY_STEPS, steps)))
    return plan


def remedy_plan(plan: dict[str, list], steps: int) -> dict[str, list]:
    """GRPO on :data:`REMEDY_BASE` and on ``exact recompute`` read at ``steps`` (the same runs),
    and each remedy from the same start."""
    cfgs = plan[REMEDY_BASE][:REMEDY_SEEDS]
    out = {f"GRPO | {REMEDY_BASE}": [replace(c, steps=steps) for c in cfgs],
           "GRPO | exact recompute": [replace(c, steps=steps) for c in
                                      plan[_label("exact", "recompute")][:REMEDY_SEEDS]]}
    for label, method in REMEDIES.items():
        out[f"{label} | {REMEDY_BASE}"] = [replace(c, steps=steps, method=method,
                                                   dump_tokens=False) for c in cfgs]
    return out


def run_numbers(run, steps: int) -> dict:
    """A run's summary (``tailtheory.lopti.training.run_summary``) and its per-step curves:
    reward, k1, k3, mean ``|log rho|``, length, TRM's acceptance monitor, tokens, PPO ratio."""
    from tailtheory.engine.trainer import read_metrics
    from tailtheory.lopti.training import run_curves, run_summary

    lines = read_metrics(run)[:steps]
    per_step = {"k1": "mismatch/k1", "k3": "mismatch/k3", "abs_mean": "mismatch/abs_mean",
                "len_mean": "rollout/len_mean", "accept_rate": "trm/accept_rate",
                "tokens": "rollout/tokens", "ratio_mean": "loss/ratio_mean",
                "clipfrac": "loss/clipfrac"}
    return {**run_summary(run, steps), **run_curves(run, steps),
            **{k: [m[key] for m in lines] for k, key in per_step.items()}}


def measure_v(plan: dict[str, list], workers: int = 1, progress: bool = True) -> dict:
    """Label -> list over seeds of :func:`run_numbers`, plus V3's and T14's token numbers
    (:func:`v3_token_numbers`, ``tailtheory.trm.training.t14_token_numbers``) of runs that
    dumped their tokens."""
    from tailtheory.lopti.training import run_plan

    runs = run_plan(plan, workers, progress)
    out = {}
    for label, paths in runs.items():
        out[label] = []
        for c, p in zip(plan[label], paths):
            row = {"seed": c.seed, **run_numbers(p, c.steps)}
            if c.dump_tokens and "|" not in label:   # "GRPO | base" repeats the base's runs
                row.update(token_numbers(p, c))
            out[label].append(row)
    return out


def read_tokens(run, steps: int):
    """The token dump of a run's first ``steps`` steps as one table (``trainer.dump_tokens``)."""
    import pandas as pd
    from pathlib import Path

    files = [Path(run) / "tokens" / f"step_{s:06d}.parquet" for s in range(steps)]
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"{run} has no token dump for {len(missing)} steps "
                                f"({missing[0]}, ...): run it with dump_tokens=True")
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def token_numbers(run, cfg) -> dict:
    """V3 and T14 numbers of a run's token dump."""
    from tailtheory.trm.training import t14_token_numbers

    df = read_tokens(run, cfg.steps)
    return {"v3": v3_token_numbers(df), "t14": t14_token_numbers(df)}


C_EDGES = [-(10.0 ** e) for e in range(0, -7, -1)] + [0.0] + [10.0 ** e for e in range(-6, 1)]
"""Histogram edges of ``C`` (symmetric, logarithmic; values beyond +-1 go to the end bins)."""

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
"""Quantiles of ``C`` stored per run and sign of ``A``."""


def contribution(df):
    """V3: ``C = -(r - 1) A`` per token with ``r = pi_train / pi_old`` at the update.

    Source: TIM (V3). ``log r = log_rho - (log pi_old - log pi_roll)`` (``log_rho = log pi_train -
    log pi_roll``): ``log_rho`` itself under bypass (``pi_old = pi_roll``), 0 under recompute
    (``pi_old = pi_train``). The engine computes ``log_rho`` in float32, so the difference of the
    dumped log-probs is rounded to float32 first: then recompute gives ``r = 1`` exactly.
    Shapes: a token table -> a column.
    """
    import numpy as np

    old_minus_roll = (df["logp_old"] - df["logp_roll"]).to_numpy().astype(np.float32)
    log_r = df["log_rho"].to_numpy() - old_minus_roll.astype(np.float64)
    return -np.expm1(log_r) * df["adv"].to_numpy()


def v3_token_numbers(df) -> dict:
    """Per sign of ``A`` (``pos``, ``neg``): tokens, tokens with ``C != 0``, with ``C > 0``, sum
    of ``C``, quantiles, histogram on :data:`C_EDGES`; ``max_abs_c``; tokens with ``A = 0``."""
    import numpy as np

    c, adv = contribution(df), df["adv"].to_numpy()
    edges = np.array([-np.inf] + C_EDGES[1:-1] + [np.inf])
    out = {"max_abs_c": float(np.abs(c).max()) if len(c) else 0.0,
           "zero_adv": int((adv == 0).sum())}
    for name, sel in (("pos", adv > 0), ("neg", adv < 0)):
        x = c[sel]
        out[name] = {"n": int(sel.sum()), "nonzero": int((x != 0).sum()),
                     "positive": int((x > 0).sum()), "sum": float(x.sum()),
                     "quantiles": [float(q) for q in np.quantile(x, QUANTILES)] if len(x) else [],
                     "hist": np.histogram(x, edges)[0].tolist()}
    return out


def skew(v3: dict) -> float:
    """``P(C > 0 | A > 0) - P(C > 0 | A < 0)`` over tokens with ``C != 0`` (0 when none)."""
    frac = lambda s: v3[s]["positive"] / v3[s]["nonzero"] if v3[s]["nonzero"] else 0.0  # noqa
    return frac("pos") - frac("neg")


def _mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def v3_evidence(data: dict) -> Evidence:
    """V3 from :func:`measure_v`'s numbers (rule in the module docstring)."""
    ex_r, ex_b = data["exact recompute"], data["exact bypass"]
    n = len(ex_b[0]["reward"])
    same = all(b["reward"] == r["reward"][:n] for r, b in zip(ex_r, ex_b))
    zero = max(r["v3"]["max_abs_c"] for r in ex_r + ex_b)
    rec = [r for p in PATHS[1:] for r in data[_label(p, "recompute")]]
    r_dev = max(abs(x - 1) for r in rec for x in r["ratio_mean"])
    clipped = max(x for r in rec for x in r["clipfrac"])
    nums = {"exact:bypass_equals_recompute": "yes" if same else "no",
            "exact:max_abs_C": zero, "recompute:max_abs_ratio_minus_1": r_dev,
            "recompute:max_clipfrac": clipped}
    verdicts = []
    for path in PATHS[1:]:
        rows = data[_label(path, "bypass")]
        sk = [skew(r["v3"]) for r in rows]
        m, se = _mean_se(sk)
        med = {s: sum(r["v3"][s]["quantiles"][3] for r in rows) / len(rows) for s in ("pos", "neg")}
        nums.update({f"{path} bypass:skew": m, f"{path} bypass:skew_se": se,
                     f"{path} bypass:skew_min_seed": min(sk),
                     f"{path} bypass:median_C_pos": med["pos"],
                     f"{path} bypass:median_C_neg": med["neg"],
                     f"{path} bypass:mean_C_pos": _mean_c(rows, "pos"),
                     f"{path} bypass:mean_C_neg": _mean_c(rows, "neg")})
        verdicts.append(Verdict.TOY_SCALE if min(sk) > 0 and m > 2 * se else
                        Verdict.REFUTED if m < -2 * se else Verdict.NOT_REPRODUCED)
    exact_ok = same and zero == 0.0
    rec_ok = r_dev < RATIO_ATOL and clipped == 0.0
    verdict = (Verdict.REFUTED if not exact_ok or Verdict.REFUTED in verdicts else
               Verdict.TOY_SCALE if rec_ok and set(verdicts) == {Verdict.TOY_SCALE} else
               Verdict.NOT_REPRODUCED)
    return Evidence(verdict, nums, "criterion: exact bypass = exact recompute bitwise with C = 0; "
                    "C = 0 at every recompute update; bypass skew P(C>0|A>0) - P(C>0|A<0) > 0 "
                    "in every seed and > 2 se (bf16 and fp8)")


def _mean_c(rows: list, sign: str) -> float:
    return sum(r["v3"][sign]["sum"] for r in rows) / max(1, sum(r["v3"][sign]["n"] for r in rows))


def harm_table(data: dict) -> list[dict]:
    """Every mismatch configuration against ``exact recompute`` at its knob: ``compare`` on final
    reward and held-out accuracy, plus whether it collapsed (final reward < 0.05 in some seed)."""
    from tailtheory.lopti.training import compare

    out = []
    for label in data:
        if label.startswith("exact") or "|" in label:
            continue
        ref = _label("exact", "recompute", _knob_of(label))
        c, e = compare(data, ref, label, "final_reward"), compare(data, ref, label, "final_eval")
        out.append({"label": label, "reference": ref, "gap": c["delta"], "se": c["se"],
                    "gap_z": c["delta"] / c["se"] if c["se"] else float("inf") * c["delta"],
                    "harmed": c["verdict"] == Verdict.TOY_SCALE, "gap_eval": e["delta"],
                    "se_eval": e["se"],
                    "collapsed": any(r["final_reward"] < 0.05 for r in data[label]),
                    "exact_collapsed": any(r["final_reward"] < 0.05 for r in data[ref])})
    return out


def v4_evidence(data: dict) -> Evidence:
    """V4 from :func:`measure_v`'s numbers (rule in the module docstring)."""
    from tailtheory.lopti.training import compare

    rows = harm_table(data)
    nums = {}
    for r in rows:
        nums[f"{r['label']}:gap_reward"] = r["gap"]
        nums[f"{r['label']}:se"] = r["se"]
        nums[f"{r['label']}:gap_heldout"] = r["gap_eval"]
    for label, rs in data.items():
        nums[f"{label}:final_reward"] = sum(r["final_reward"] for r in rs) / len(rs)
    base = f"GRPO | {REMEDY_BASE}"
    for label in REMEDIES:
        key = f"{label} | {REMEDY_BASE}"
        if key in data:
            c = compare(data, key, base, "final_reward")
            nums[f"{label}:vs_grpo"], nums[f"{label}:vs_grpo_se"] = c["delta"], c["se"]
            e = compare(data, key, "GRPO | exact recompute", "final_reward")
            nums[f"{label}:vs_exact"], nums[f"{label}:vs_exact_se"] = e["delta"], e["se"]
    harmed = [r["label"] for r in rows if r["harmed"]]
    nums["harmed"] = ", ".join(harmed) or "none"
    return Evidence(Verdict.TOY_SCALE if harmed else Verdict.NOT_REPRODUCED, nums,
                    "criterion: some mismatch configuration's final reward (last 10 steps) below "
                    "exact recompute's at the same knob by > 2 se over seeds")


def _window_k3(rows: list, first: bool) -> float:
    sl = slice(0, FINAL_WINDOW) if first else slice(-FINAL_WINDOW, None)
    return sum(sum(r["k3"][sl]) / len(r["k3"][sl]) for r in rows) / len(rows)


def v5_evidence(data: dict) -> Evidence:
    """V5 from :func:`measure_v`'s numbers (rule in the module docstring)."""
    harmed = [r["label"] for r in harm_table(data) if r["harmed"]]
    nums, flat = {}, []
    for label in [lb for lb in data if not lb.startswith("exact") and "|" not in lb]:
        k_first, k_last = _window_k3(data[label], True), _window_k3(data[label], False)
        ratio = k_last / k_first if k_first > 0 else float("inf")
        nums[f"{label}:k3_first"], nums[f"{label}:k3_final"] = k_first, k_last
        nums[f"{label}:k3_ratio"] = ratio
        nums[f"{label}:reward_first"] = sum(r["first_reward"] for r in data[label]) / len(
            data[label])
        nums[f"{label}:reward_final"] = sum(r["final_reward"] for r in data[label]) / len(
            data[label])
        if label in harmed:
            flat.append(1 / FLAT <= ratio <= FLAT)
    nums["harmed"] = ", ".join(harmed) or "none"
    verdict = (Verdict.NOT_REPRODUCED if not flat else Verdict.TOY_SCALE if any(flat)
               else Verdict.REFUTED)
    return Evidence(verdict, nums, f"criterion: a configuration V4 finds harmed keeps its mean k3 "
                    f"over the last 10 steps within x{FLAT:g} of the first 10 (none harmed: "
                    f"NOT-REPRODUCED)")


def training_data(profile: str) -> dict:
    """The stored full-preset measurement (``quick``) or a new one (``thorough``)."""
    from tailtheory.lopti.training import measured_plan

    return measured_plan("mismatch_training", v_plan("full"), measure_v, profile,
                         "06_mismatch_in_training.py")


def main_labels(data: dict) -> list[str]:
    """The main regime's path x mode labels present in ``data``."""
    return [_label(p, m) for p in PATHS for m in MODES if _label(p, m) in data]


def knob_labels(data: dict) -> list[str]:
    """The knob runs' labels present in ``data``."""
    return [lb for lb in data if _knob_of(lb) and "|" not in lb]


def remedy_labels(data: dict) -> list[str]:
    """GRPO on the base, on exact, and the remedies, as present in ``data``."""
    return [lb for lb in data if "|" in lb]

