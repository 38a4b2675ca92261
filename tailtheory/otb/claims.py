"""Checks of the optimal token baseline O1-O6 (OTB, arXiv 2602.07078; docs/claims.md).

O1, O2, O5 are identities checked to machine precision on exact tabular policies; O3, O4 are
exact variances over a sweep of random policies (seeds, sharpness, horizon, with and without
EOS) plus a gradient-ascent search for a counterexample; O6 is a Monte Carlo study of finite
groups against the exact gradient.
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import ATOL_F64
from tailtheory.core.registry import (LEARN_DECODER, Evidence, Verdict, pick, register,
                                     superseded)
from tailtheory.core.tabular import TabularPolicy
from tailtheory.core.tabular import random_rewards
from tailtheory.otb import variance as bv
from tailtheory.otb import training
from tailtheory.otb.baselines import self_inclusion_residual, token_energy
from tailtheory.otb.experiments import group_table, variance_table

FD_H = 1e-5
"""Central finite-difference step for dJ/dB: exact on a quadratic up to rounding."""

FD_RTOL = 1e-8
"""``|dJ/dB| / E[sum_t ||S_<=t||^2]`` below which the derivative counts as zero (rounding of
the finite difference with ``FD_H``)."""

RATIO_ATOL = 1e-9
"""Variance ratios within this of 1 count as equal (exact float64 sums)."""

O6_CLAIM_N = 4
"""The headline: OTB at N = 4 matches N = 32 without it (OTB abstract)."""


def _o1_policies(profile):
    pols = [TabularPolicy.random(3, 3, sharpness=1.0, seed=0),
            TabularPolicy.random(3, 3, eos=0, sharpness=30.0, seed=1),
            TabularPolicy.random(2, 4, sharpness=5.0, seed=2)]
    return pols + pick(profile, [], [TabularPolicy.random(3, 4, eos=2, sharpness=s, seed=4)
                                     for s in (0.1, 10.0)])


@register("O1", paper="OTB", statement="w_t equals the exact squared score norm of a tabular "
          "policy", expected=Verdict.HOLDS)
def check_o1(profile: str) -> Evidence:
    """O1: w_t (from sum p^2 and pi_t) against the autograd score over the whole logit table."""
    err, n = 0.0, 0
    for pol in _o1_policies(profile):
        w = token_energy(pol.probs().pow(2).sum(-1)[pol.ctx], pol.token_logp, pol.mask)
        err = max(err, (bv.autograd_sq_norms(pol) - w)[pol.mask].abs().max().item())
        n += int(pol.mask.sum())
    ok = err <= ATOL_F64
    return Evidence(Verdict.HOLDS if ok else Verdict.REFUTED,
                    {"max_abs_err": err, "tokens_checked": n, "atol": ATOL_F64})


@register("O2", paper="OTB", statement="OTB minimises J(B) = sum_t E[||S_<=t||^2 (G_t - B_t)^2 "
          "m_t]", expected=Verdict.HOLDS_UNDER)
def check_o2(profile: str) -> Evidence:
    """O2: dJ/dB = 0 at OTB; the proxy W_t equals ||S_<=t||^2 only under orthogonal scores."""
    fd_true, proxy_err, fd_tied = 0.0, 0.0, float("inf")
    cases = pick(profile, [(3, 3, None, 1.0), (3, 4, 0, 2.0)],
                 [(3, 3, None, 1.0), (3, 4, 0, 2.0), (4, 3, None, 0.5), (2, 6, 1, 4.0)])
    for seed, (V, T, eos, sh) in enumerate(cases):
        pol = TabularPolicy.random(V, T, eos=eos, sharpness=sh, seed=seed)
        R = bv.binary_rewards(pol, seed=seed)
        for tied in (False, True):
            S2 = bv.prefix_sq_norms(bv.score_gram(pol, tied=tied), pol.mask)
            scale = float(pol.expect(S2.sum(-1)))
            J = lambda b: bv.prefix_surrogate(pol, R, b, S2)  # noqa: E731
            B_true = bv.weighted_baseline(pol, R, S2)
            d_true = bv.fd_gradient(J, B_true, FD_H).abs().max().item() / scale
            fd_true = max(fd_true, d_true)
            if tied:
                proxy = bv.population_baselines(pol, R)["otb"]
                fd_tied = min(fd_tied, bv.fd_gradient(J, proxy, FD_H).abs().max().item() / scale)
            else:
                proxy_err = max(proxy_err, (S2 - bv.tabular_energy(pol) * pol.mask).abs().max()
                                .item())
    sym = all(r == 0 for r in bv.surrogate_argmin_residuals())
    holds = fd_true <= FD_RTOL and proxy_err <= ATOL_F64 and sym
    verdict = (Verdict.HOLDS_UNDER if holds and fd_tied > FD_RTOL else
               Verdict.HOLDS if holds else Verdict.REFUTED)
    return Evidence(verdict, {"rel_dJdB_at_otb_true_norms": fd_true,
                              "proxy_vs_true_prefix_norm_err": proxy_err,
                              "sympy_closed_form": str(sym),
                              "rel_dJdB_at_proxy_otb_tied_min": fd_tied},
                    "assumption: cross-token orthogonality of scores (exact for tabular policies); "
                    "with one logit bias shared by all contexts the proxy W_t misses the cross "
                    "terms and dJ/dB at proxy-OTB is no longer 0")


@register("O3", paper="OTB", statement="B = M^-1 c, not OTB, minimises the true estimator variance",
          expected=Verdict.HOLDS)
def check_o3(profile: str) -> Evidence:
    """O3: V(B) >= V(M^-1 c) for every baseline of the sweep; V(OTB) > V(M^-1 c) somewhere."""
    rows = variance_table(profile)
    names = [k for k in rows[0] if k.startswith("ratio_")]
    lowest = min(r[k] for r in rows for k in names)
    otb = [r["ratio_otb"] for r in rows]
    token = max(abs(r["ratio_token"] - 1) for r in rows)
    sharp = sorted({r["sharpness"] for r in rows})
    med = {sh: _median([r["ratio_otb"] for r in rows if r["sharpness"] == sh]) for sh in sharp}
    ok = lowest >= 1 - RATIO_ATOL and max(otb) > 1 + RATIO_ATOL
    grows = all(med[a] <= med[b] for a, b in zip(sharp, sharp[1:]))
    return Evidence(Verdict.HOLDS if ok else Verdict.REFUTED,
                    {"V_otb_over_V_opt_min": min(otb), "V_otb_over_V_opt_max": max(otb),
                     "V_otb_over_V_opt_median": _median(otb),
                     f"median_at_sharpness_{sharp[0]:g}": med[sharp[0]],
                     f"median_at_sharpness_{sharp[-1]:g}": med[sharp[-1]],
                     "min_ratio_any_baseline": lowest, "token_weighted_vs_opt_max_dev": token,
                     "policies": len(rows)},
                    f"tabular: M is diagonal and M^-1 c is the per-token-energy (w_t) weighted "
                    f"mean, not the cumulative-W_t one; V(OTB)/V(opt) spans {min(otb):.5f}-"
                    f"{max(otb):.4f} (earlier estimate 1.05-1.08), its median "
                    f"{'rising' if grows else 'not monotone'} with sharpness "
                    f"({med[sharp[0]]:.4g} at {sharp[0]:g}, {med[sharp[-1]]:.4g} at {sharp[-1]:g})")


def _median(xs):
    return sorted(xs)[len(xs) // 2]


O4_EOS_GRID = {"V": (3, 4), "T": (2, 3, 4, 5), "sharpness": (0.5, 1.0, 2.0, 4.0)}
"""Random policies with EOS (token 0) for how typical V(OTB) > V(mean) is: every grid cell at
each seed of the profile, binary and uniform rewards."""


def o4_typicality(profile: str) -> dict:
    """O4 with EOS: the fraction of random tabular policies (binary and uniform rewards) whose
    ``V(OTB) / V(mean)`` exceeds 1, and the excess ``(V(OTB) - V(mean)) / ||grad J||^2``."""
    import itertools


    ratios, excess = [], []
    g = O4_EOS_GRID
    for V, T, sh, seed in itertools.product(g["V"], g["T"], g["sharpness"],
                                            range(pick(profile, 2, 8))):
        pol = TabularPolicy.random(V, T, eos=0, sharpness=sh, seed=seed)
        for R in (bv.binary_rewards(pol, seed=seed + 1000), random_rewards(pol, seed=seed + 2000)):
            ratio, ex = _otb_vs_mean(pol, R)
            ratios.append(ratio)
            excess.append(ex)
    over = [e for r, e in zip(ratios, excess) if r > 1 + RATIO_ATOL]
    return {"eos_policies": len(ratios), "eos_frac_ratio_above_1": len(over) / len(ratios),
            "eos_ratio_max": max(ratios),
            "eos_excess_over_gradsq_max": max(over) if over else 0.0,
            "eos_excess_over_gradsq_median": _median(over) if over else 0.0}


def _otb_vs_mean(pol, R) -> tuple[float, float]:
    """``V(OTB) / V(mean)`` and ``(V(OTB) - V(mean)) / ||grad J||^2`` of one policy."""
    w = torch.diagonal(bv.score_gram(pol), dim1=1, dim2=2)               # (N, T)
    v_otb = float(bv.baseline_variance(pol, R, bv.weighted_baseline(pol, R, w.cumsum(-1))))
    v_mean = float(bv.baseline_variance(pol, R, pol.expect(R).expand(pol.T)))
    return v_otb / v_mean, (v_otb - v_mean) / float(bv.exact_gradient(pol, R).pow(2).sum())


def running_mean_gap(e: torch.Tensor, b: torch.Tensor, c: float) -> float:
    """The no-EOS lemma of O4: ``sum_t e_t (B_t - b_t)^2 - sum_t e_t (c - b_t)^2 <= 0`` for any
    weights ``e > 0``, values ``b`` and constant ``c``, with ``B_t`` the ``e``-weighted running
    mean of ``b_1..b_t`` (OTB's population baseline without EOS, ``b_t = E[w_t G] / E[w_t]``).

    Proof: with ``E_t = sum_{j<=t} e_j`` and ``S_t = sum_{j<=t} e_j (b_j - B_t)^2``,
    ``S_t - S_{t-1} = e_t (E_{t-1}/E_t) (b_t - B_{t-1})^2 >= e_t (E_{t-1}/E_t)^2 (b_t -
    B_{t-1})^2 = e_t (B_t - b_t)^2``; summing, the left sum is at most ``S_T = min_c sum_t e_t
    (c - b_t)^2``. Shapes: e, b (T,) -> ().
    """
    B = (e * b).cumsum(0) / e.cumsum(0)
    return float((e * (B - b) ** 2).sum() - (e * (c - b) ** 2).sum())


def _lemma_worst(profile: str) -> float:
    """Largest ``running_mean_gap / sum_t e_t (c - b_t)^2`` over random inputs (must be <= 0)."""
    gen = torch.Generator().manual_seed(0)
    worst = -float("inf")
    for _ in range(pick(profile, 2000, 50000)):
        T = int(torch.randint(1, 9, (1,), generator=gen))
        e = torch.exp(3 * torch.randn(T, generator=gen, dtype=torch.float64))
        b = torch.rand(T, generator=gen, dtype=torch.float64)
        c = float(torch.rand(1, generator=gen))
        scale = float((e * (c - b) ** 2).sum())
        if scale > 0:
            worst = max(worst, running_mean_gap(e, b, c) / scale)
    return worst


@register("O4", paper="OTB", statement="V(OTB) / V(group mean) < 1", expected=Verdict.REFUTED)
def check_o4(profile: str) -> Evidence:
    """O4: the exact ratio over the sweep, a gradient-ascent search for ratio >= 1, how typical
    and how large the excess is with EOS, and the no-EOS lemma (:func:`running_mean_gap`)."""
    rows = variance_table(profile)
    ratios = [r["otb_over_mean"] for r in rows]
    free = [r["otb_over_mean"] for r in rows if r["eos"] == -1]
    steps = pick(profile, 40, 300)
    adv_eos, pol, R = bv.adversarial_otb_ratio(3, 3, eos=0, seed=0, steps=steps)
    adv_free = max(bv.adversarial_otb_ratio(3, 3, eos=None, seed=s, steps=steps)[0]
                   for s in pick(profile, (0,), (0, 1, 2)))
    worst = max(max(ratios), adv_eos, adv_free)
    typ = o4_typicality(profile)
    lemma = _lemma_worst(profile)
    verdict = Verdict.REFUTED if worst > 1 + RATIO_ATOL else Verdict.HOLDS
    return Evidence(verdict, {"sweep_ratio_min": min(ratios), "sweep_ratio_max": max(ratios),
                              "sweep_no_eos_ratio_max": max(free),
                              "adversarial_ratio_eos": adv_eos,
                              "adversarial_excess_over_gradsq": _otb_vs_mean(pol, R)[1],
                              "adversarial_ratio_no_eos": adv_free, "policies": len(rows),
                              **typ, "no_eos_lemma_worst_gap": lemma},
                    f"counterexample: V=3, T=3, eos=0, logits and rewards from "
                    f"adversarial_otb_ratio(3, 3, eos=0, seed=0, steps={steps}) give "
                    f"V(OTB)/V(mean) = {adv_eos:.3g} (mean = E[R], GRPO's limit); random "
                    f"policies give {min(ratios):.3g}-{max(ratios):.3g} (earlier toy estimate "
                    f"0.66-0.75); with EOS {typ['eos_frac_ratio_above_1']:.1%} of "
                    f"{typ['eos_policies']} random policies exceed 1, by at most "
                    f"{typ['eos_excess_over_gradsq_max']:.3g} ||grad J||^2; without EOS the "
                    f"search reaches {adv_free:.6g} and V(OTB) <= V(any constant) is a theorem "
                    f"for tabular policies (running_mean_gap; worst random gap {lemma:.2g})")


@register("O5", paper="OTB", statement="G^i - B* = W^-i/(W^i + W^-i) (G^i - B^-i): a shrunk "
          "weighted RLOO", expected=Verdict.HOLDS)
def check_o5(profile: str) -> Evidence:
    """O5: the identity (eps = 0) on random groups with energies from 1e-12 to 2 per token."""
    g = torch.Generator().manual_seed(0)
    err, n = 0.0, 0
    for _ in range(pick(profile, 50, 1000)):
        B, T = int(torch.randint(2, 17, (1,), generator=g)), int(torch.randint(1, 9, (1,),
                                                                              generator=g))
        gid = torch.randint(0, 3, (B,), generator=g)
        mask = torch.arange(T)[None] < torch.randint(1, T + 1, (B, 1), generator=g)
        R = (torch.rand(B, generator=g) < 0.5).double()
        w = 2 * torch.rand(B, T, generator=g, dtype=torch.float64) ** 8
        W = (w * mask).cumsum(-1)
        res, ok = self_inclusion_residual(R, W, mask, gid)
        err = max(err, res[ok].abs().max().item() if ok.any() else 0.0)
        n += int(ok.sum())
    holds = err <= ATOL_F64
    return Evidence(Verdict.HOLDS if holds else Verdict.REFUTED,
                    {"max_abs_err": err, "positions_checked": n, "atol": ATOL_F64})


@register("O6", paper="OTB", statement="N = 4 with OTB matches N = 32 without: (a) one-step "
          "group gradients, (b) in training (reward for the tokens spent)",
          expected=Verdict.REFUTED)
def check_o6(profile: str) -> Evidence:
    """O6: (a) smallest N at which each method reaches GRPO's N = 32 cosine (and RLOO's N = 32
    relative MSE, since GRPO's std rescales its gradient); (b) OTB N = 4 against GRPO N = 4 and
    N = 16 in GRPO training (``tailtheory.otb.training``). The worse of the two verdicts."""
    rows = group_table(profile)
    by_cos = bv.matching_group_size(rows, "cosine", ("grpo", 32))
    by_mse = bv.matching_group_size(rows, "rel_mse", ("rloo", 32))
    cell = {(r["method"], r["N"]): r for r in rows}
    n_otb = by_cos["otb"]
    one_step = (Verdict.TOY_SCALE if n_otb is not None and n_otb <= O6_CLAIM_N
                else Verdict.NOT_REPRODUCED)
    # no position-dependent baseline, not even the variance-optimal B = M^-1 c (an exact critic),
    # can turn N = 4 into N = 32 when V(mean) / V(opt) < 32 / 4 on every policy
    best_gain = max(r["ratio_mean"] / r["ratio_opt"] for r in variance_table(profile))
    trained = training.o6_training_evidence(training.STUDY.data(profile))
    verdict = (Verdict.REFUTED if Verdict.REFUTED in (one_step, trained.verdict) else
               Verdict.TOY_SCALE if one_step == trained.verdict == Verdict.TOY_SCALE else
               Verdict.NOT_REPRODUCED)
    return Evidence(verdict,
                    {"b:measured on": "learn recipe", "b:rollout decoder": LEARN_DECODER,
                     "a:verdict": one_step.value, "a:cos_otb_N4": cell[("otb", 4)]["cosine"],
                     "a:cos_grpo_N32": cell[("grpo", 32)]["cosine"],
                     "a:N_match_cos_otb": str(n_otb), "a:N_match_mse_otb": str(by_mse["otb"]),
                     "a:cos_otb_N32": cell[("otb", 32)]["cosine"],
                     "a:relmse_otb_N4": cell[("otb", 4)]["rel_mse"],
                     "a:relmse_rloo_N32": cell[("rloo", 32)]["rel_mse"],
                     "a:max_V_mean_over_V_opt": best_gain,
                     "b:verdict": trained.verdict.value,
                     **{f"b:{k}": v for k, v in trained.numbers.items()},
                     "b (no-learning regime, superseded): verdict": superseded("O6")["verdict"]},
                    "(a) tabular policies (V 3-4, T 4-5, with and without EOS), binary rewards, "
                    "Monte Carlo over groups; cosine is scale-free (GRPO, Dr. GRPO and RLOO share "
                    "one direction per group); a zero update counts as cosine 0; the variance-optimal "
                    f"baseline cuts V(mean) by at most {best_gain:.3g}x < 32/4 on the O3/O4 sweep, "
                    "so no position-dependent baseline reaches it. (b) kk_trace GRPO runs, "
                    "the learn recipe (32 prompts x N per step, 120 steps, 5 seeds); "
                    + trained.note,
                    key=("a:verdict", "b:verdict", "b:otb_minus_large", "b:otb_minus_large_se"))
