"""Checks of TRM's trust-region claims T1-T14 (TRM, arXiv 2512.23075; docs/claims.md).

T1-T8 and T10 share one sweep of random tabular pairs (dense and sparse perturbations, ``V`` 2..4,
``T`` up to 12 with ``V = 2``, with and without EOS), each scored with the reward in ``[0, 1]``
that maximises ``|Error|``, so a bound that holds there holds for every reward. Verdicts come
from the measured slacks: one violation beyond rounding refutes a bound.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import torch

from tailtheory.core.registry import Evidence, Verdict, pick, register
from tailtheory.core.tabular import TabularPolicy, random_rewards
from tailtheory.tim import dose, training as paths
from tailtheory.trm import experiments as tx
from tailtheory.trm import mask as tm
from tailtheory.trm import training
from tailtheory.trm.exact import context_kl, delta_t9, error, k3_expectation

BOUND_CLAIMS = {"T1": "classical", "T2": "pm_kl", "T3": "pm_tv", "T4": "mix_kl", "T5": "mix_tv",
                "T6": "coupling", "T7": "adaptive", "T8": "unified"}

T13_TS = tuple(range(2, 13))
"""Horizons of the T13 growth fit (``V = 2``: up to 4096 sequences)."""

T13_SCALE = 0.3
"""Logit noise of the T13 pairs; one logit pair shared by every context (stationary), so the
per-step divergences stay fixed as T grows and each bound shows its nominal exponent."""


def _counterexample(df: pd.DataFrame, col: str) -> str:
    slack = df[col] - df["abs_error"] + df["num_tol"]
    r = df.loc[slack.idxmin()]
    return (f"V={r.V}, T={r.T}, eos={r.eos}, kind={r.kind}, sharpness={r.sharpness}, "
            f"scale={r.scale}, frac={r.frac}, pair_seed={r.pair_seed}: "
            f"|Error|={r.abs_error:.6g} > {col}={r[col]:.6g}")


def _bound_check(cid: str, profile: str) -> Evidence:
    """T1-T8: bound ``cid`` >= exact worst-case ``|Error|`` on every pair of the sweep; its
    tightness (largest ``|Error| / bound``) and how often it is the smallest of T2-T7."""
    key = BOUND_CLAIMS[cid]
    df = tx.sweep_table(profile)
    full = tx.slack_table(df).set_index("bound").loc[key]
    half = tx.slack_table(df, "half").set_index("bound").loc[key]
    numbers = {"pairs": len(df), "violations": int(full.violations),
               "min_slack": float(full.min_slack),
               "max_ratio_err_over_bound": float(full.max_ratio),
               "max_ratio_halved": float(half.max_ratio)}
    for col, tag in (("tightest", "T2_T7"), ("tightest_T2_T6", "T2_T6")):
        share = df.groupby("kind")[col].apply(lambda s: float((s == key).mean()))
        for kind in ("dense", "sparse"):
            numbers[f"share_min_{tag}/{kind}"] = float(share.get(kind, 0.0))
    wkey = "classical" if key == "coupling" else key
    if wkey in tx.T10_WITNESSES:
        numbers["witness_ratio_err_over_bound"] = tx.witness_ratio(wkey, key, prefix="bound")
    if full.violations:
        return Evidence(Verdict.REFUTED, numbers, _counterexample(df, f"bound/{key}"))
    return Evidence(Verdict.HOLDS, numbers, f"worst-case reward per pair; |Error| reaches "
                    f"{full.max_ratio:.3f} of the bound (halved: {half.max_ratio:.3f})")


def _make_bound_claim(cid: str, statement: str) -> None:
    register(cid, paper="TRM", statement=statement, expected=Verdict.HOLDS)(
        functools.partial(_bound_check, cid))


_make_bound_claim("T1", "classical bound 2T(T-1)eps^2 on abs(Error)")
_make_bound_claim("T2", "Pinsker-marginal KL bound")
_make_bound_claim("T3", "Pinsker-marginal TV bound")
_make_bound_claim("T4", "Mixed KL bound 4T min(1,sqrt(delta/2)) min(1,sqrt(D^seq_KL/2))")
_make_bound_claim("T5", "Mixed TV bound 4T min(1,eps) min(1,D^seq_TV)")
_make_bound_claim("T6", "Coupling bound")
_make_bound_claim("T7", "Adaptive bound")
_make_bound_claim("T8", "Unified bound = min of T2-T7")


@register("T9", paper="TRM", statement="Error = -Delta (exact identity)", expected=Verdict.HOLDS)
@tx.one_thread
def _t9(profile: str) -> Evidence:
    """T9: ``Error + Delta = 0`` on the sweep's pairs, with worst-case and random rewards."""
    df = tx.sweep_table(profile)
    worst = ((df["error"] + df["delta_t9"]).abs() / df["num_tol"]).max()
    rng_pairs = [tx.make_pair(2, T, eos, 1.0, 1.0, 1.0, seed=T)
                 for T, eos in zip(range(1, 11), [None, 0] * 5)]
    rnd = 0.0
    for roll, theta in rng_pairs:
        R = random_rewards(roll, seed=roll.T)
        rnd = max(rnd, abs(error(roll, theta, R) + delta_t9(roll, theta, R)))
    ok = worst <= 1.0 and rnd < 1e-12
    numbers = {"pairs": len(df) + len(rng_pairs), "max_abs_error_plus_delta_random_R": rnd,
               "max_residual_over_rounding_budget": float(worst)}
    return Evidence(Verdict.HOLDS if ok else Verdict.REFUTED, numbers,
                    "" if ok else "Error + Delta exceeds the rounding budget")


@register("T10", paper="TRM", statement="every bound still holds when halved",
          expected=Verdict.HOLDS)
def _t10(profile: str) -> Evidence:
    """T10 (derived): the halved bounds of T1-T8 against the same worst-case errors."""
    df = tx.sweep_table(profile)
    half = tx.slack_table(df, "half").set_index("bound")
    numbers = {"pairs": len(df), "violations": int(half.violations.sum()),
               **{f"max_ratio_halved/{k}": float(half.loc[k, "max_ratio"]) for k in half.index}}
    witness = {}
    for key in tx.T10_WITNESSES:
        witness[key] = tx.witness_ratio(key)
        numbers[f"witness_ratio_halved/{key}"] = witness[key]
    if half.violations.sum() or max(witness.values()) > 1 + 1e-9:
        worst = half.violations.idxmax()
        return Evidence(Verdict.REFUTED, numbers, _counterexample(df, f"half/{worst}"))
    return Evidence(Verdict.HOLDS, numbers, "halved bounds hold on every pair; pinned V=T=2 "
                    "witnesses reach " + ", ".join(f"{v:.5f} of halved {k}"
                                                   for k, v in witness.items()))


@register("T11", paper="TRM", statement="no f with delta <= f(D^seq_KL)", expected=Verdict.HOLDS)
@tx.one_thread
def _t11(profile: str) -> Evidence:
    """T11: a rare context with KL 1 keeps ``delta = 1`` while ``D^seq_KL = p -> 0``."""
    ps = np.logspace(-1, pick(profile, -10, -14), pick(profile, 10, 30))
    fam = tx.t11_family(ps)
    delta_const = float((fam["delta"] - 1.0).abs().max())
    ratio = float((fam["seq_kl"] / fam["p_rare"] - 1.0).abs().max())
    ok = delta_const < 1e-9 and ratio < 1e-6 and fam["seq_kl"].min() < 1e-9
    numbers = {"members": len(fam), "min_seq_kl": float(fam["seq_kl"].min()),
               "max_abs_delta_minus_1": delta_const, "max_rel_dev_seq_kl_vs_p": ratio}
    note = ("V=2, T=2: first token 1 w.p. p under pi_roll; only after it KL(roll||theta)=1; "
            f"delta=1 for all p while D^seq_KL=p down to {fam['seq_kl'].min():.2g}")
    return Evidence(Verdict.HOLDS if ok else Verdict.REFUTED, numbers, note)


def _t12_hand_cases() -> int:
    """Mismatches between ``trm_mask`` and hand-computed decisions (0 when all agree)."""
    kl = torch.tensor([[0.01, 0.02, 0.5], [0.05, 0.05, 0.05], [0.3, 0.0, 0.0], [0.0, 0.9, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    # max over alive: .5 .05 .3 0 ; mean over alive: .177 .05 .15 0
    want = {"max": [False, True, False, True], "avg": [False, True, True, True],
            "both": [False, True, False, True]}
    bad = sum(int((tm.trm_mask(mask, c, kl=kl, delta_max=0.1, delta_avg=0.16)
                   != torch.tensor(w)).sum()) for c, w in want.items())
    lr = torch.tensor([[0.1, -0.5], [0.2, 0.2]])                        # k2: .005 .125 | .02 .02
    bad += int((tm.trm_mask(torch.ones(2, 2, dtype=torch.bool), "max", log_ratio=lr,
                            delta_max=0.1) != torch.tensor([False, True])).sum())
    loss, _ = tm.trm_masked_loss(torch.ones(4, 3), mask, torch.tensor([True, False, True, False]))
    bad += int(abs(loss.item() - (3 + 2) / 4) > 1e-12)                   # / all 4 sequences
    return bad


@register("T12", paper="TRM",
          statement="sequence masking criteria (max / avg / both; k2, k3); P(accept) = (1-q)^T",
          expected=Verdict.HOLDS)
@tx.one_thread
def _t12(profile: str) -> Evidence:
    """T12: masks against hand cases; ``E_roll[k3] = KL`` exactly; ``(1-q)^T`` by simulation."""
    bad = _t12_hand_cases()
    pol = TabularPolicy.random(6, 1, sharpness=3.0, seed=1)               # one context
    th = pol.perturbed(2.0, seed=2)
    k3_err = abs(k3_expectation(pol, th).sum().item() - context_kl(pol, th).item())
    B = pick(profile, 8000, 200000)
    zmax = float(tx.acceptance_table((0.001, 0.01, 0.05), (1, 16, 64, 256), B)["z"].max())
    ok = bad == 0 and k3_err < 1e-12 and zmax < 5.0
    keep256 = tm.acceptance_prob(0.01, 256).item()
    numbers = {"hand_case_mismatches": bad, "k3_mean_minus_kl": k3_err,
               "max_z_sim_vs_(1-q)^T": zmax, "B": B, "accept_q0.01_T256": keep256}
    return Evidence(Verdict.HOLDS if ok else Verdict.REFUTED, numbers,
                    f"length bias: at q=1% a 256-token sequence is kept with probability "
                    f"{keep256:.1%}")


@register("T13", paper="TRM", statement="growth exponent of abs(Error) in T vs the bounds' "
          "T^2, T^1.5, T", expected=Verdict.TOY_SCALE)
@tx.one_thread
def _t13(profile: str) -> Evidence:
    """T13: fitted exponent of the worst-case ``|Error|`` in ``T`` beside the bounds'."""
    seeds = range(pick(profile, 3, 10))
    df = tx.error_vs_T(T13_TS, scale=T13_SCALE, seeds=seeds, stationary=True)
    mean = df.groupby("T").mean(numeric_only=True)
    fit = mean.index >= 4
    expo = {"abs_error": tx.growth_exponent(mean.index[fit], mean["abs_error"][fit])}
    for k in ("classical", "pm_kl", "mix_kl", "mix_tv", "coupling", "adaptive"):
        expo[k] = tx.growth_exponent(mean.index[fit], mean[f"bound/{k}"][fit])
    rnd = tx.error_vs_T(T13_TS, scale=T13_SCALE, seeds=seeds, reward="random", stationary=True)
    rmean = rnd.groupby("T")["abs_error"].mean()
    expo_rnd = tx.growth_exponent(rmean.index[fit], rmean[fit])
    bound_expo = [v for k, v in expo.items() if k != "abs_error"]
    grows = expo["abs_error"] > 0.5 and mean["abs_error"].iloc[-1] > mean["abs_error"].iloc[0]
    numbers = {f"exponent/{k}": round(v, 3) for k, v in expo.items()}
    numbers["exponent/abs_error_random_R"] = round(expo_rnd, 3)
    return Evidence(Verdict.TOY_SCALE if grows else Verdict.NOT_REPRODUCED, numbers,
                    f"V=2, stationary pair (logit noise {T13_SCALE}), T=4..12, worst-case "
                    f"reward: |Error| ~ T^{expo['abs_error']:.2f}; random reward ~ "
                    f"T^{expo_rnd:.2f}; smallest bound exponent {min(bound_expo):.2f}")


@register("T14", paper="TRM", statement="in GRPO runs with a real mismatch TRM's acceptance "
          "follows (1-q)^T in response length, and sequence masking keeps training stable where "
          "PPO clipping alone does not", expected=Verdict.REFUTED)
def _t14(profile: str) -> Evidence:
    """T14 on the learning testbed (:func:`tailtheory.trm.training.t14_evidence`: V3's and
    V6's stored runs), the no-learning regime's recorded verdict beside it."""

    return training.t14_evidence(paths.STUDY.data(profile),
                                 dose.STUDY.data(profile)).superseding("T14")
