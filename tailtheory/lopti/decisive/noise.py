"""Decisiveness with its noise shown: what of ``D`` is signal, and which calls the noise allows.

Source: the ledger's rule of 2026-11-29 (``paper_repro.md``, "Decisiveness with its noise
shown"). ``tau`` is the 90th percentile of ``D`` on free tokens
(:mod:`tailtheory.lopti.decisive.calibration`), so a free token is called decisive about 10% of
the time, and at ``K = 64`` the per-token standard error of ``D`` (0.057) sits next to ``tau``
(0.081): a share of ``D >= tau`` over a few dozen tokens is mostly the estimator's noise floor.
The rule written in ``paper_repro.md`` on 2026-11-29, before any share under it is measured:

- **Per-token se**: ``se = (1 - p) sd(r_with - r_without) / sqrt(K)`` over the ``K`` paired
  continuations (:func:`d_se`; the ``D_se`` of
  :func:`~tailtheory.lopti.decisive.branches.branch_values`).
- **Excess mean D**: ``mean(D) - sqrt(2 / pi) mean(se)``. Under no effect the estimated gap is
  about normal with mean 0 and sd ``se`` (a sum of ``K`` paired differences of bounded rewards),
  so ``E|gap_hat| = sqrt(2 / pi) se``, the half-normal mean: the noise expectation of ``D``
  (:func:`noise_expectation`). It counts what a free token contributes as 0 (on average).
- **Debiased RMS**: ``sqrt(max(0, mean(D^2) - mean(se^2)))``; ``E[D_hat^2] = D^2 + se^2`` with
  ``se^2`` the unbiased variance of the mean, so ``mean(D^2) - mean(se^2)`` is unbiased for the
  mean square of the true ``D`` (:func:`debiased_rms`).
- **Intervals**: percentile bootstrap resampling prompts with replacement (a prompt's ``G``
  responses share its problem: tokens of one prompt are not independent),
  :data:`N_BOOT` resamples, seeded (:func:`cluster_bootstrap`).
- **Three-way calls** per token: ``decisive`` when ``D - 2 se >= tau``, ``free`` when
  ``D + 2 se < tau``, else ``undetermined`` (:func:`three_way`), tallied by role.
- **Reporting floor**: a share is reported only from at least :data:`MIN_TOKENS` lowest-bin
  tokens of at least :data:`MIN_PROMPTS` prompts of one policy; below, ``not reportable`` with
  the counts (:func:`share_report`).

Pure numpy. Shapes: ``n`` tokens, ``K`` continuations a branch.
"""

from __future__ import annotations

import numpy as np

from tailtheory.lopti.decisive.probe import FREE_ROLES

Z_CALL = 2.0
"""Standard errors between ``D`` and ``tau`` for a call (the rule's ``2 se``)."""

MIN_TOKENS = 200
"""Lowest-bin tokens of one policy a share needs (issue 59: shares over hundreds of tokens)."""

MIN_PROMPTS = 40
"""Prompts those tokens must come from (a prompt's tokens share its problem)."""

N_BOOT = 2000
"""Bootstrap resamples of prompts."""

LEVEL = 0.95
"""The intervals' coverage."""

HALF_NORMAL = float(np.sqrt(2 / np.pi))
"""``E|X| / sd`` of a normal ``X`` of mean 0."""

CALLS = ("decisive", "free", "undetermined")
"""The three-way calls."""


def d_se(rewards_with, rewards_without, p) -> np.ndarray:
    """Per-token standard error of ``D`` from its two branches' ``K`` paired outcomes:
    ``(1 - p) sd(r_with - r_without, ddof=1) / sqrt(K)``. Shapes: rewards ``(n, K)``, p ``(n,)``
    -> ``(n,)``. Branches without an alternative (NaN rewards) give 0 (their ``D`` is 0)."""
    rw, ro = np.asarray(rewards_with, float), np.asarray(rewards_without, float)
    if rw.shape != ro.shape or rw.ndim != 2 or rw.shape[1] < 2:
        raise ValueError(f"rewards must be (n, K) with K >= 2, the same for both branches; got "
                         f"{rw.shape} and {ro.shape}")
    se = (rw - ro).std(1, ddof=1) / np.sqrt(rw.shape[1])
    return (1 - np.asarray(p, float)) * np.nan_to_num(se)


def noise_expectation(se) -> float:
    """Mean ``D`` of tokens of no effect at these standard errors: ``sqrt(2 / pi) mean(se)``."""
    return HALF_NORMAL * float(np.mean(se))


def excess_mean_d(D, se) -> float:
    """``mean(D) - sqrt(2 / pi) mean(se)``: mean ``D`` above its noise expectation."""
    return float(np.mean(D)) - noise_expectation(se)


def debiased_rms(D, se) -> float:
    """``sqrt(max(0, mean(D^2) - mean(se^2)))``: the RMS of ``D`` with its noise removed."""
    D, se = np.asarray(D, float), np.asarray(se, float)
    return float(np.sqrt(max(0.0, np.mean(D**2) - np.mean(se**2))))


def cluster_bootstrap(stat, prompts, *arrays, n_boot: int = N_BOOT, seed: int = 0,
                      level: float = LEVEL) -> tuple[float, float, float]:
    """``(estimate, low, high)`` of ``stat(*arrays)``, the interval the percentile bootstrap's,
    resampling the distinct ``prompts`` (one label per token, ``(n,)``) with replacement and
    taking every token of each drawn prompt. ``arrays``: per-token ``(n,)`` each."""
    prompts = np.asarray(prompts)
    arrays = [np.asarray(a) for a in arrays]
    if any(len(a) != len(prompts) for a in arrays):
        raise ValueError("every array needs one value per token (as many as prompts)")
    if len(prompts) == 0:
        return (float("nan"),) * 3
    labels, idx = np.unique(prompts, return_inverse=True)
    members = [np.flatnonzero(idx == c) for c in range(len(labels))]
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for b in range(n_boot):
        take = np.concatenate([members[c] for c in rng.integers(0, len(labels), len(labels))])
        draws[b] = stat(*(a[take] for a in arrays))
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(stat(*arrays)), float(lo), float(hi)


def three_way(D, se, tau: float) -> np.ndarray:
    """Each token's call (:data:`CALLS`): ``decisive`` when ``D - 2 se >= tau``, ``free`` when
    ``D + 2 se < tau``, else ``undetermined``. Shapes: ``(n,)`` -> ``(n,)`` of str."""
    D, se = np.asarray(D, float), np.asarray(se, float)
    return np.where(D - Z_CALL * se >= tau, "decisive",
                    np.where(D + Z_CALL * se < tau, "free", "undetermined"))


def calls_by_role(D, se, roles, tau: float) -> dict:
    """Role -> ``{call: count}`` of :func:`three_way` (roles ``None``: one role ``all``)."""
    calls = three_way(D, se, tau)
    roles = np.array(["all" if r is None else r for r in roles], dtype=object)
    return {r: {c: int(((roles == r) & (calls == c)).sum()) for c in CALLS}
            for r in dict.fromkeys(roles.tolist())}


def share_report(decisive, prompts, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The share of lowest-bin tokens of one policy called decisive (``decisive``: bool
    ``(n,)``; ``prompts``: each token's prompt), with its prompt-clustered interval; below
    :data:`MIN_TOKENS` tokens or :data:`MIN_PROMPTS` prompts it is not reported:
    ``{"reportable": False, "tokens", "prompts", "note"}``."""
    decisive = np.asarray(decisive, bool)
    n, m = len(decisive), len(np.unique(np.asarray(prompts)))
    out = {"tokens": n, "prompts": m}
    if n < MIN_TOKENS or m < MIN_PROMPTS:
        return {"reportable": False, **out,
                "note": f"not reportable: {n} tokens of {m} prompts (floor: {MIN_TOKENS} tokens "
                        f"of {MIN_PROMPTS} prompts)"}
    share, lo, hi = cluster_bootstrap(np.mean, prompts, decisive.astype(float), n_boot=n_boot,
                                      seed=seed)
    return {"reportable": True, **out, "share": share, "low": lo, "high": hi,
            "note": f"{share:.3f} [{lo:.3f}, {hi:.3f}] of {n} tokens of {m} prompts"}


def token_prompts(tokens: list[dict], group_size: int) -> list[tuple]:
    """Each probed token's prompt ``(seed, batch, row // G)``: stored tokens name their row,
    new ones their prompt too."""
    return [(t["seed"], t["batch"], t.get("prompt", t["row"] // group_size)) for t in tokens]


def noise_summary(data: dict, tau: float, group_size: int, free_roles=FREE_ROLES,
                  n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The lowest bin of one policy's measurement (``measure_decisiveness``' output) under the
    rule: tokens and prompts, mean ``D``, its noise expectation, excess mean ``D`` and the
    debiased RMS with their intervals, the median and 90th percentile of the free roles'
    ``se``, the calls by role, and the decisive share (``D - 2 se >= tau``) or why it is not
    reported."""
    low = [t for t in data["tokens"] if t["bin"] == 0]
    D = np.array([t["D"] for t in low], float)
    se = np.array([t["D_se"] for t in low], float)
    prompts = [str(p) for p in token_prompts(low, group_size)]
    roles = [t.get("role") for t in low]
    out = {"tokens": len(low), "prompts": len(set(prompts)),
           "D_mean": float(D.mean()) if len(D) else float("nan"),
           "noise_mean": noise_expectation(se) if len(se) else float("nan")}
    for name, fn in (("excess_D", excess_mean_d), ("rms_D", debiased_rms)):
        est, lo, hi = cluster_bootstrap(fn, prompts, D, se, n_boot=n_boot, seed=seed)
        out.update({name: est, f"{name}_low": lo, f"{name}_high": hi})
    out["se_free"] = free_se(data["tokens"], free_roles)
    out["calls"] = calls_by_role(D, se, roles, tau)
    out["share"] = share_report(three_way(D, se, tau) == "decisive", prompts, n_boot, seed)
    return out


def free_se(tokens: list[dict], free_roles=FREE_ROLES) -> dict:
    """``{"n", "median", "q90"}`` of ``D_se`` over the free-role tokens of a measurement."""
    se = np.array([t["D_se"] for t in tokens if t.get("role") in free_roles], float)
    if not len(se):
        return {"n": 0, "median": float("nan"), "q90": float("nan")}
    return {"n": int(len(se)), "median": float(np.median(se)), "q90": float(np.quantile(se, 0.9))}


def se_before_after(before: list[dict], after: list[dict],
                    free_roles=FREE_ROLES) -> dict:
    """The per-token se of ``D`` on free tokens of two measurements of the same tokens, before
    coupling (``inverse_cdf``) and after (``coupled``): :func:`free_se` of each and the ratio of
    their medians (after / before)."""
    b, a = free_se(before, free_roles), free_se(after, free_roles)
    ratio = a["median"] / b["median"] if b["n"] and a["n"] and b["median"] > 0 else float("nan")
    return {"before": b, "after": a, "median_ratio": ratio}


def noise_table(summary: dict) -> "pd.DataFrame":
    """:func:`noise_summary`'s calls as a table: one row per role of the lowest bin with its
    ``decisive``, ``free`` and ``undetermined`` counts."""
    import pandas as pd

    return pd.DataFrame([{"role": r, **c} for r, c in summary["calls"].items()],
                        columns=["role", *CALLS])


def noise_text(summary: dict) -> str:
    """:func:`noise_summary` in a sentence: the lowest bin's counts, excess mean ``D`` and
    debiased RMS with their intervals, the calls, and the share or why it is not reported."""
    s = summary
    calls = {c: sum(v[c] for v in s["calls"].values()) for c in CALLS}
    return (f"lowest bin: {s['tokens']} tokens of {s['prompts']} prompts, excess mean D "
            f"{s['excess_D']:.3g} [{s['excess_D_low']:.3g}, {s['excess_D_high']:.3g}], "
            f"debiased RMS {s['rms_D']:.3g} [{s['rms_D_low']:.3g}, {s['rms_D_high']:.3g}] "
            f"(prompt-clustered {LEVEL:.0%}); calls "
            + " / ".join(f"{calls[c]} {c}" for c in CALLS)
            + f"; decisive share (D - 2 se >= tau) {s['share']['note']}")


def plot_excess(summaries: dict, reference: float | None = None):
    """The lowest bin's excess mean ``D`` of each policy (``summaries``: name ->
    :func:`noise_summary`) with its prompt-clustered interval, and its three-way calls as stacked
    bars; ``reference`` (optional) dotted across the first panel (e.g. 3x ``matched``'s).
    Returns ``(figure, table)``: one row per name with the counts, excess ``D`` and its interval,
    the calls and the share or why it is not reported."""
    import matplotlib.pyplot as plt
    import pandas as pd

    rows = []
    for name, s in summaries.items():
        calls = {c: sum(v[c] for v in s["calls"].values()) for c in CALLS}
        rows.append({"policy": name, "tokens": s["tokens"], "prompts": s["prompts"],
                     "excess_D": s["excess_D"], "low": s["excess_D_low"],
                     "high": s["excess_D_high"], **calls, "share": s["share"]["note"]})
    df = pd.DataFrame(rows)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    y = np.arange(len(df))
    a.errorbar(df["excess_D"], y, xerr=[df["excess_D"] - df["low"], df["high"] - df["excess_D"]],
               fmt="o", color="C3", capsize=3)
    if reference is not None:
        a.axvline(reference, ls=":", color="0.4")
    a.axvline(0, color="0.8", lw=0.8)
    a.set_yticks(y, [f"{p} ({t} tok, {m} prompts)" for p, t, m in
                     zip(df["policy"], df["tokens"], df["prompts"])], fontsize=7)
    a.set_xlabel(f"excess mean D of the lowest bin ({LEVEL:.0%}, prompts resampled)")
    left = np.zeros(len(df))
    for c, color in zip(CALLS, ("C3", "C0", "0.7")):
        frac = df[c] / df[list(CALLS)].sum(axis=1).clip(lower=1)
        b.barh(y, frac, left=left, color=color, label=c)
        left += frac
    b.set_yticks(y, [])
    b.set_xlabel("share of the lowest bin's probed tokens")
    b.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    fig.tight_layout()
    return fig, df
