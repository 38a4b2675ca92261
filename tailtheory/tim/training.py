"""Mismatch in training (claim V3): identical GRPO runs on the learning testbed that differ only
in the rollout path, under both ways of getting ``pi_old``.

Source: TIM (Zhong et al., arXiv 2605.14220; VeXact): a small token-level disagreement between
rollout and trainer can, by itself, destabilise RL. Task ``kk_trace`` (responses of ~100 tokens)
on the ``learn`` recipe; rollout paths ``exact`` (V1: zero mismatch), ``bf16`` and ``fp8`` (e4m3
weights, bf16 compute), each on the fast engine; ``pi_old`` by ``recompute`` or ``bypass``. V4
and V5 are judged on the real-path arms of V6's dose study (:mod:`tailtheory.tim.dose`).

The arms (:func:`learn_arms`, the study :data:`STUDY`), fixed before measuring: ``exact`` under
both modes for :data:`EXACT_BYPASS_STEPS` steps (the ``exact`` path gives bitwise the same run
under both modes, V1), ``bf16`` and ``fp8`` under both for the recipe's 120, seeds 1-5, every
run dumping its tokens, from which V3's contribution ``C = -(r - 1) A`` and TRM's acceptance
against length (T14, :mod:`tailtheory.trm.training`) are computed; ``r = pi_new / pi_old`` at
the step's update, which runs at ``pi_old``'s weights, so ``r = pi_train / pi_old``: exactly 1
under recompute, ``rho`` under bypass.

Verdict (fixed before measuring; ``compare`` is the 2-standard-error rule over seeds of
:mod:`tailtheory.experiments.study`):

- **V3** ``TOY-SCALE`` when (a) at zero mismatch both modes coincide: ``exact bypass``'s reward
  lines equal ``exact recompute``'s bitwise and ``max |C| = 0`` in both; (b) under recompute
  ``C = 0`` at every update of every mismatch run (``|loss/ratio_mean - 1| < 1e-9``, no clipped
  token); (c) under bypass ``C`` skews by the sign of ``A`` on ``bf16`` and ``fp8``:
  ``skew = P(C > 0 | A > 0) - P(C > 0 | A < 0)`` (over tokens with ``C != 0``) is positive in
  every seed and its seed mean exceeds 2 standard errors. ``REFUTED`` when (a) fails or the
  skew is negative by 2 se; else ``NOT-REPRODUCED``.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.experiments.comparison import Z_CRIT, mean_se
from tailtheory.experiments.measures import Measure, register_measure
from tailtheory.experiments.presets import SEEDS, train_config
from tailtheory.experiments.study import Arm, Study, register_study
from tailtheory.tim.dose import PATH_SEEDS
from tailtheory.tim.length_acceptance import t14_token_numbers
from tailtheory.tim.rho_sign import rho_sign_numbers

PATHS = ("exact", "bf16", "fp8")
"""Rollout paths of the comparison (fp16 sits between bf16 and exact: cut for time)."""

MODES = ("recompute", "bypass")
"""``pi_old`` modes (TIM, V3)."""

EXACT_BYPASS_STEPS = 10
"""``exact bypass`` is bitwise ``exact recompute`` (V1); this many steps show it."""

RATIO_ATOL = 1e-9
"""V3 (b): ``|loss/ratio_mean - 1|`` below this counts as ``r = 1``."""


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


def v3_evidence(data) -> Evidence:
    """V3 from the study's numbers (rule in the module docstring)."""
    m = STUDY.measurement(data)
    arm = lambda path, mode: m[m.label(path=path, pi_old=mode)]  # noqa: E731
    ex_r, ex_b = arm("exact", "recompute"), arm("exact", "bypass")
    n = len(ex_b[0]["reward"])
    same = all(b["reward"] == r["reward"][:n] for r, b in zip(ex_r, ex_b))
    zero = max(r["v3"]["max_abs_c"] for r in ex_r + ex_b)
    rec = [r for p in PATHS[1:] for r in arm(p, "recompute")]
    r_dev = max(abs(x - 1) for r in rec for x in r["ratio_mean"])
    clipped = max(x for r in rec for x in r["clipfrac"])
    nums = {"exact:bypass_equals_recompute": "yes" if same else "no",
            "exact:max_abs_C": zero, "recompute:max_abs_ratio_minus_1": r_dev,
            "recompute:max_clipfrac": clipped}
    verdicts = []
    for path in PATHS[1:]:
        rows = arm(path, "bypass")
        sk = [skew(r["v3"]) for r in rows]
        mu, se = mean_se(sk)
        med = {s: sum(r["v3"][s]["quantiles"][3] for r in rows) / len(rows) for s in ("pos", "neg")}
        nums.update({f"{path} bypass:skew": mu, f"{path} bypass:skew_se": se,
                     f"{path} bypass:skew_min_seed": min(sk),
                     f"{path} bypass:median_C_pos": med["pos"],
                     f"{path} bypass:median_C_neg": med["neg"],
                     f"{path} bypass:mean_C_pos": _mean_c(rows, "pos"),
                     f"{path} bypass:mean_C_neg": _mean_c(rows, "neg")})
        verdicts.append(Verdict.TOY_SCALE if min(sk) > 0 and mu > Z_CRIT * se else
                        Verdict.REFUTED if mu < -Z_CRIT * se else Verdict.NOT_REPRODUCED)
    exact_ok = same and zero == 0.0
    rec_ok = r_dev < RATIO_ATOL and clipped == 0.0
    verdict = (Verdict.REFUTED if not exact_ok or Verdict.REFUTED in verdicts else
               Verdict.TOY_SCALE if rec_ok and set(verdicts) == {Verdict.TOY_SCALE} else
               Verdict.NOT_REPRODUCED)
    return Evidence(verdict, nums, "criterion: exact bypass = exact recompute bitwise with C = 0; "
                    "C = 0 at every recompute update; bypass skew P(C>0|A>0) - P(C>0|A<0) > 0 "
                    "in every seed and > 2 se (bf16 and fp8)",
                    key=("bf16 bypass:skew", "bf16 bypass:skew_se", "fp8 bypass:skew",
                         "fp8 bypass:skew_se"))


def _mean_c(rows: list, sign: str) -> float:
    return sum(r["v3"][sign]["sum"] for r in rows) / max(1, sum(r["v3"][sign]["n"] for r in rows))


def _label(path: str, mode: str) -> str:
    return f"{path} {mode}"


def learn_arms(preset: str) -> list[Arm]:
    """``exact`` under both modes for :data:`EXACT_BYPASS_STEPS` steps, ``bf16`` and ``fp8``
    under both for the preset's steps, every run dumping its tokens; tags ``path`` and
    ``pi_old``. On ``learn``: the recipe's 120 steps, seeds 1-5
    (:data:`tailtheory.tim.dose.PATH_SEEDS`); ``bf16 recompute``, ``fp8 recompute`` and ``fp8
    bypass`` are then the dose study's real-path runs (the same configs)."""

    base = replace(train_config(preset), dump_tokens=True)
    seeds = PATH_SEEDS if preset == "learn" else SEEDS[preset]
    return [Arm(_label(path, mode), tuple(
        replace(base, rollout=path, pi_old=mode, seed=s,
                steps=min(EXACT_BYPASS_STEPS, base.steps) if path == "exact" else base.steps)
        for s in seeds), {"path": path, "pi_old": mode})
        for path in PATHS for mode in MODES]


STUDY = register_study(Study(
    "mismatch_learn", learn_arms,
    series={"k1": "mismatch/k1", "k3": "mismatch/k3", "abs_mean": "mismatch/abs_mean",
            "len_mean": "rollout/len_mean", "accept_rate": "trm/accept_rate",
            "tokens": "rollout/tokens", "ratio_mean": "loss/ratio_mean",
            "clipfrac": "loss/clipfrac"},
    tokens={"v3": v3_token_numbers, "t14": t14_token_numbers, "rho_sign": rho_sign_numbers}))
"""V3 on the learning testbed, stored run by run in ``results/mismatch_learn.json``
(``tailtheory study mismatch_learn``): per run its summary, curves, mismatch and length series
and its token numbers (V3's, T14's and the sign-free row of :mod:`tailtheory.tim.rho_sign`)."""


SUPERSEDED = register_measure(Measure(
    "mismatch_training", "V3, V4, V5, T14 in the no-learning regime (full preset, 20 steps, 3 "
    "seeds): rollout paths, pi_old modes, knobs and remedies",
    superseded="studies mismatch_learn and mismatch_dose"))
