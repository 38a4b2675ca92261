"""Mismatch in training (claims V3, V4, V5): identical GRPO runs that differ only in the rollout
path, under both ways of getting ``pi_old``, then TIM's remedies from the same start.

Source: TIM (Zhong et al., arXiv 2605.14220; VeXact): a small token-level disagreement between
rollout and trainer can, by itself, destabilise RL; the remedies weigh or mask by
``rho = pi_train / pi_roll`` (``tailtheory methods``). Task ``kk_trace`` (responses of ~100
tokens) from the full preset's warm start; rollout paths ``exact`` (V1: zero mismatch), ``bf16``
and ``fp8`` (e4m3 weights, bf16 compute); ``pi_old`` by ``recompute`` or ``bypass``.

The arms (:func:`v_arms`, the study :data:`STUDY`), fixed before measuring:

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

Verdicts (fixed before measuring; ``compare`` is the 2-standard-error rule over seeds of
:mod:`tailtheory.engine.study`, on final reward, the mean of the last 10 steps):

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

from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.engine.run_numbers import window_means
from tailtheory.engine.comparison import Z_CRIT, mean_se
from tailtheory.engine.study import Arm, Study, register_study
from tailtheory.tim.rho_sign import rho_sign_numbers
from tailtheory.trm.training import t14_token_numbers

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

FLAT = 2.0
"""V5: the mismatch KL counts as flat when its final-window mean is within this factor of its
first-window mean."""

RATIO_ATOL = 1e-9
"""V3 (b): ``|loss/ratio_mean - 1|`` below this counts as ``r = 1``."""


def _label(path: str, mode: str, knob: str = "") -> str:
    return f"{path} {mode}" + (f" {knob}" if knob else "")


def v_arms(preset: str, remedies: bool = True) -> list[Arm]:
    """The paths under both modes, the knobs and (``remedies``) the remedies, over the preset's
    seeds; tags ``path``, ``pi_old``, ``knob`` ("" in the main regime), ``method`` and ``role``
    (``main``, ``knob`` or ``remedy``)."""
    from tailtheory.engine.presets import SEEDS, train_config

    base, seeds = train_config(preset), SEEDS[preset]
    steps = base.steps if preset != "full" else MAIN_STEPS
    tags = lambda path, mode, knob, role, method="grpo": {  # noqa: E731
        "path": path, "pi_old": mode, "knob": knob, "role": role, "method": method}
    arms = []
    for path in PATHS:
        for mode in MODES:
            n = min(EXACT_BYPASS_STEPS, steps) if (path, mode) == ("exact", "bypass") else steps
            arms.append(Arm(_label(path, mode), tuple(
                replace(base, rollout=path, pi_old=mode, steps=n, seed=s,
                        dump_tokens=(path, mode) in DUMPED) for s in seeds),
                tags(path, mode, "", "main")))
    for knob, (over, n, pairs) in KNOBS.items():
        for path, mode in pairs:
            arms.append(Arm(_label(path, mode, knob), tuple(
                replace(base, rollout=path, pi_old=mode, seed=s,
                        steps=n if preset == "full" else min(n, base.steps),
                        dump_tokens=not over and (path, mode) in DUMPED, **over)
                for s in seeds), tags(path, mode, knob, "knob")))
    if not remedies:
        return arms
    # GRPO on the base and on exact recompute (the same runs, read at the remedies' length: no
    # token numbers twice), and each remedy from the same start
    steps, by_label = min(REMEDY_STEPS, steps), {a.label: a for a in arms}
    path, mode = REMEDY_BASE.split(" ")
    cfgs = by_label[REMEDY_BASE].configs[:REMEDY_SEEDS]
    exact = by_label[_label("exact", "recompute")].configs[:REMEDY_SEEDS]
    arms.append(Arm(f"GRPO | {REMEDY_BASE}", tuple(replace(c, steps=steps) for c in cfgs),
                    tags(path, mode, "", "remedy"), tokens=False))
    arms.append(Arm("GRPO | exact recompute", tuple(replace(c, steps=steps) for c in exact),
                    tags("exact", "recompute", "", "remedy"), tokens=False))
    arms += [Arm(f"{label} | {REMEDY_BASE}", tuple(replace(c, steps=steps, method=method,
                                                           dump_tokens=False) for c in cfgs),
                 tags(path, mode, "", "remedy", method)) for label, method in REMEDIES.items()]
    return arms


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


STUDY = register_study(Study(
    "mismatch_training", v_arms, notebook="06_mismatch_in_training.py",
    series={"k1": "mismatch/k1", "k3": "mismatch/k3", "abs_mean": "mismatch/abs_mean",
            "len_mean": "rollout/len_mean", "accept_rate": "trm/accept_rate",
            "tokens": "rollout/tokens", "ratio_mean": "loss/ratio_mean",
            "clipfrac": "loss/clipfrac"},
    tokens={"v3": v3_token_numbers, "t14": t14_token_numbers}))
"""V3-V5, and T14 (which reads this measurement through ``get_study``): per run its summary,
curves, mismatch and length series, and the token numbers of the runs that dumped tokens."""


def skew(v3: dict) -> float:
    """``P(C > 0 | A > 0) - P(C > 0 | A < 0)`` over tokens with ``C != 0`` (0 when none)."""
    frac = lambda s: v3[s]["positive"] / v3[s]["nonzero"] if v3[s]["nonzero"] else 0.0  # noqa
    return frac("pos") - frac("neg")


def v3_evidence(data) -> Evidence:
    """V3 from the study's numbers (rule in the module docstring)."""
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
        m, se = mean_se(sk)
        med = {s: sum(r["v3"][s]["quantiles"][3] for r in rows) / len(rows) for s in ("pos", "neg")}
        nums.update({f"{path} bypass:skew": m, f"{path} bypass:skew_se": se,
                     f"{path} bypass:skew_min_seed": min(sk),
                     f"{path} bypass:median_C_pos": med["pos"],
                     f"{path} bypass:median_C_neg": med["neg"],
                     f"{path} bypass:mean_C_pos": _mean_c(rows, "pos"),
                     f"{path} bypass:mean_C_neg": _mean_c(rows, "neg")})
        verdicts.append(Verdict.TOY_SCALE if min(sk) > 0 and m > Z_CRIT * se else
                        Verdict.REFUTED if m < -Z_CRIT * se else Verdict.NOT_REPRODUCED)
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


def harm_table(data) -> list[dict]:
    """Every mismatch configuration against ``exact recompute`` at its knob: ``compare`` on final
    reward and held-out accuracy, plus whether it collapsed (final reward < 0.05 in some seed)."""
    m = STUDY.measurement(data)
    out = []
    for label in m.labels(role="main") + m.labels(role="knob"):
        knob = m.tags[label]["knob"]
        if m.tags[label]["path"] == "exact":
            continue
        ref = m.label(path="exact", pi_old="recompute", knob=knob, role="knob" if knob else "main")
        c, e = m.compare(ref, label, "final_reward"), m.compare(ref, label, "final_eval")
        out.append({"label": label, "reference": ref, "gap": c.delta, "se": c.se,
                    "gap_z": c.delta / c.se if c.se else float("inf") * c.delta,
                    "harmed": c.verdict == Verdict.TOY_SCALE, "gap_eval": e.delta,
                    "se_eval": e.se,
                    "collapsed": any(r["final_reward"] < 0.05 for r in m[label]),
                    "exact_collapsed": any(r["final_reward"] < 0.05 for r in m[ref])})
    return out


def v4_evidence(data) -> Evidence:
    """V4 from the study's numbers (rule in the module docstring)."""
    m = STUDY.measurement(data)
    rows = harm_table(m)
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
            c = m.compare(key, base, "final_reward")
            nums[f"{label}:vs_grpo"], nums[f"{label}:vs_grpo_se"] = c.delta, c.se
            e = m.compare(key, "GRPO | exact recompute", "final_reward")
            nums[f"{label}:vs_exact"], nums[f"{label}:vs_exact_se"] = e.delta, e.se
    harmed = [r["label"] for r in rows if r["harmed"]]
    nums["harmed"] = ", ".join(harmed) or "none"
    return Evidence(Verdict.TOY_SCALE if harmed else Verdict.NOT_REPRODUCED, nums,
                    "criterion: some mismatch configuration's final reward (last 10 steps) below "
                    "exact recompute's at the same knob by > 2 se over seeds")


def v5_evidence(data) -> Evidence:
    """V5 from the study's numbers (rule in the module docstring)."""
    m = STUDY.measurement(data)
    harmed = [r["label"] for r in harm_table(m) if r["harmed"]]
    nums, flat = {}, []
    for label in [lb for lb in m.labels(role="main") + m.labels(role="knob")
                  if m.tags[lb]["path"] != "exact"]:
        k_first, k_last = window_means(data[label], "k3")
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



def main_labels(data) -> list[str]:
    """The main regime's path x mode labels present in ``data``."""
    return STUDY.measurement(data).labels(role="main")


def knob_labels(data) -> list[str]:
    """The knob runs' labels present in ``data``."""
    return STUDY.measurement(data).labels(role="knob")


def remedy_labels(data) -> list[str]:
    """GRPO on the base, on exact, and the remedies, as present in ``data``."""
    return STUDY.measurement(data).labels(role="remedy")


def learn_arms(preset: str) -> list[Arm]:
    """V3 on the learning testbed (preset ``learn`` only), with the arm labels and tags of
    :func:`v_arms`' main regime: ``exact`` under both modes for :data:`EXACT_BYPASS_STEPS` steps,
    ``bf16`` and ``fp8`` under both for the recipe's 120, seeds 1-5
    (:data:`tailtheory.tim.dose.PATH_SEEDS`), every run dumping its tokens.
    ``bf16 recompute``, ``fp8 recompute`` and ``fp8 bypass`` are the dose study's real-path runs
    (the same configs: :mod:`tailtheory.tim.dose`)."""
    from tailtheory.engine.presets import train_config
    from tailtheory.tim.dose import PATH_SEEDS

    if preset != "learn":
        raise ValueError(f"the learn-recipe V3 study runs on the learn preset, not {preset!r}")
    base = replace(train_config("learn"), dump_tokens=True)
    arms = []
    for path in PATHS:
        for mode in MODES:
            n = EXACT_BYPASS_STEPS if path == "exact" else base.steps
            arms.append(Arm(_label(path, mode), tuple(
                replace(base, rollout=path, pi_old=mode, steps=n, seed=s) for s in PATH_SEEDS),
                {"path": path, "pi_old": mode, "knob": "", "role": "main", "method": "grpo"}))
    return arms


LEARN_STUDY = register_study(Study(
    "mismatch_learn", learn_arms, series=STUDY.series, measure_preset="learn", incremental=True,
    tokens={**STUDY.tokens, "rho_sign": rho_sign_numbers}))
"""V3 on the learning testbed, stored run by run in ``results/mismatch_learn.json``
(``tailtheory study mismatch_learn``); the rule of :func:`v3_evidence`, unchanged, and the
sign-free row of :mod:`tailtheory.tim.rho_sign` beside it."""


from tailtheory.tim import dose as _dose  # noqa: E402,F401  (registers the V6 study, mismatch_dose)
