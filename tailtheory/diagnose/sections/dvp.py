"""P2 / P4: what DVP's min-p rule at each rho would prune (only with top-k columns).

Source: DVP (arXiv 2512.23087; P1, P2, P4): :func:`tailtheory.pruning.vocab.safe_vocab_mask`
(min-p) and :func:`~tailtheory.pruning.vocab.pruned_mass`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.columns import TOPK_MASS_TOL
from tailtheory.diagnose.sections.base import PRUNE_CONCENTRATION, Diagnosis, Section, num, plural
from tailtheory.diagnose.sections.faults import truncation_note
from tailtheory.core.safeset import safe_vocab_mask
from tailtheory.pruning.vocab import pruned_mass


NAME = "dvp"
REST_NEGLIGIBLE = 1e-9
"""Mass outside a top-k list below which the list counts as the full distribution."""


class DvpSums:
    """DVP's min-p set ``S`` from the sampler's top-k list (else the trainer's), per rho:
    whether the sampled token lies outside ``S`` and the pruned mass ``m = 1 - pi(S)`` (an upper
    bound when the list stops before the cut-off); per response the summed ``m``."""

    def __init__(self, acc):
        self.acc, self.side = acc, None
        self.topk_len = [math.inf, 0]                    # shortest and longest top-k list
        self.dvp = {f: np.zeros(len(acc.rhos)) for f in ("n", "pruned", "abs_pruned", "abs_all",
                                                         "mass", "mass_max", "mass_train",
                                                         "exact")}

    def add(self, t) -> None:
        """Fold one batch's tokens in (nothing without top-k lists); ``ValueError`` when the
        sampled token's log-prob exceeds its list's largest entry."""
        b, idx, Delta = t.batch, t.idx, t.Delta
        if b.topk_roll is None and b.topk_train is None:
            return
        ok, acc = b.ok, self.acc
        roll = b.topk_roll is not None
        side = (b.topk_roll if roll else b.topk_train)[ok]
        sampled = (b.logp_train - b.log_rho)[ok] if roll else b.logp_train[ok]
        self.side = "rollout" if roll else "train"
        a = np.abs(Delta)
        row = torch.from_numpy(np.concatenate([side, sampled[:, None]], 1))      # (n, k+1)
        over = sampled > side.max(1) + np.log1p(TOPK_MASS_TOL)
        if over.any():
            raise ValueError(f"{acc.files[b.file]}: the sampled token's log-prob exceeds the "
                             f"largest entry of the top-k list in {int(over.sum())} row(s): the "
                             f"list must hold the k most likely tokens")
        k, n = side.shape[1], len(side)
        lens = (side > -np.inf).sum(1)
        self.topk_len = [min(self.topk_len[0], int(lens.min())),
                         max(self.topk_len[1], int(lens.max()))]
        smallest = np.argmin(np.where(side > -np.inf, side, np.inf), 1)   # the list's last token
        both = roll and b.topk_train is not None
        rest, rest_train = _rest(side), (_rest(b.topk_train[ok]) if both else None)
        for r, rho in enumerate(acc.rhos):
            keep = safe_vocab_mask(row, "min_p", rho)
            out = ~keep[:, -1].numpy()                  # the sampled token lies outside S
            keep_m = torch.cat([keep[:, :k], torch.zeros(n, 1, dtype=torch.bool)], 1)
            m = pruned_mass(torch.from_numpy(np.concatenate([side, rest[:, None]], 1)),
                            keep_m).numpy()
            exact = ~keep[:, :k].numpy()[np.arange(n), smallest] | (rest == -np.inf)
            d = self.dvp
            d["n"][r] += len(side)
            d["pruned"][r] += out.sum()
            d["abs_pruned"][r] += a[out].sum()
            d["abs_all"][r] += a.sum()
            d["mass"][r] += m.sum()
            d["mass_max"][r] = max(d["mass_max"][r], float(m.max()))
            d["exact"][r] += exact.sum()
            if rest_train is not None:
                mt = pruned_mass(torch.from_numpy(np.concatenate(
                    [b.topk_train[ok], rest_train[:, None]], 1)), keep_m).numpy()
                d["mass_train"][r] += mt.sum()
            acc.seq_mass[:acc.n_seq, r] += np.bincount(idx, weights=m, minlength=acc.n_seq)


def _rest(side: np.ndarray) -> np.ndarray:
    """``log(1 - sum of the list's probabilities)``; ``-inf`` when the list holds all but
    :data:`REST_NEGLIGIBLE` of the mass (a full distribution, up to rounding)."""
    rest = -np.expm1(np.logaddexp.reduce(side, axis=1))
    with np.errstate(divide="ignore"):
        return np.where(rest > REST_NEGLIGIBLE, np.log(np.maximum(rest, REST_NEGLIGIBLE)), -np.inf)


def dvp(acc: Accumulator, d: Diagnosis, s: dict) -> None:
    """P2/P4: what DVP's min-p rule at each rho would prune (only with top-k columns)."""
    f = acc.folds[NAME]
    dv = f.dvp
    if f.side is None or dv["n"].sum() == 0:
        d.summary["dvp"] = d.summary["topk_k"] = None
        d.verdicts["dvp"] = ["needs the top-k log-probs (columns topk_logp_rollout or "
                             "topk_logp_train, docs/diagnose.md): with sampled-token log-probs "
                             "only, DVP's kept set is unknown."]
        return
    r_max = acc.r_max if acc.r_max else 1.0
    n = dv["n"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tbl = pd.DataFrame({
            "rho": acc.rhos, "tokens": n.astype(int), "pruned_token_frac": dv["pruned"] / n,
            "abs_delta_share": dv["abs_pruned"] / dv["abs_all"],
            "mean_pruned_mass": dv["mass"] / n, "max_pruned_mass": dv["mass_max"],
            "exact_frac": dv["exact"] / n,
            "p2_bias_bound_mean": r_max * s["mass"].mean(0) if len(s["mass"]) else math.nan,
            "p2_bias_bound_max": r_max * s["mass"].max(0) if len(s["mass"]) else math.nan})
        if dv["mass_train"].any():
            tbl["mean_pruned_mass_train"] = dv["mass_train"] / n
    d.tables["dvp"] = tbl
    d.summary["dvp"] = tbl.drop(columns=["tokens"]).to_dict("records")
    k_min, k_max = f.topk_len
    d.summary["topk_k"] = [int(k_min), int(k_max)]
    lo, hi = tbl.exact_frac.min(), tbl.exact_frac.max()
    k = f"top-{k_max}" if k_min == k_max else f"top-{k_min} to top-{k_max}"
    lines = [f"DVP's min-p set from the {f.side}'s {k} lists "
             f"({plural(int(n[0]), 'token')}): "
             + ("the pruned mass is exact at every position." if lo == 1 else
                "the lists stop before every cut-off, so the pruned mass is only an upper "
                "bound (longer lists make it exact)." if hi == 0 else
                f"the pruned mass is exact where the list reaches the cut-off, at "
                f"{num(100 * lo, '.3g')}% to {num(100 * hi, '.3g')}% of positions depending on "
                f"rho, and an upper bound at the rest.")]
    for _, r in tbl.iterrows():
        conc = r.abs_delta_share / r.pruned_token_frac if r.pruned_token_frac > 0 else math.nan
        what = ("prunes no sampled token" if r.pruned_token_frac == 0 else
                f"prunes {num(100 * r.pruned_token_frac, '.2g')}% of sampled tokens carrying "
                f"{num(100 * r.abs_delta_share, '.2g')}% of |Delta| ("
                + (f"{num(conc, '.2g')}x their share: targets the mismatch)"
                   if conc >= PRUNE_CONCENTRATION else
                   f"{num(conc, '.2g')}x their share: below {PRUNE_CONCENTRATION:g}x, "
                   f"no knee (P4))"))
        note = truncation_note(r.exact_frac, int(k_max), int(k_min))
        lines.append(f"rho = {r.rho:g}: {what}; mean pruned mass {num(r.mean_pruned_mass)}"
                     + (f" ({note})" if note else "")
                     + f", P2 bias bound R_max sum_t m = {num(r.p2_bias_bound_mean)} per response "
                     f"on average (R_max = {r_max:g}).")
    d.verdicts["dvp"] = lines


def _figure(d: Diagnosis, plt):
    t = d.tables["dvp"]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    a.plot(t.rho, t.pruned_token_frac, "o-", label="sampled tokens pruned")
    a.plot(t.rho, t.abs_delta_share, "s-", label="share of |Delta| they carry")
    a.plot(t.rho, t.mean_pruned_mass, "^-", label="mean pruned mass m")
    a.set(xscale="log", xlabel="min-p ratio rho", title="DVP's pruning at several rho (P2/P4)")
    a.set_yscale("symlog", linthresh=1e-8)
    a.set_ylim(bottom=0)                                   # every quantity here is >= 0
    a.legend(fontsize=7)
    return fig, t


SUMMARY = {
    "dvp": "per rho: pruned_token_frac (sampled tokens outside DVP's min-p set), "
           "abs_delta_share (their share of abs(Delta)), mean_pruned_mass / max_pruned_mass "
           "(m = 1 - pi(S), an upper bound where the list stops early), exact_frac, "
           "p2_bias_bound_mean / _max (R_max sum_t m per response) and, with both lists, "
           "mean_pruned_mass_train (null without top-k columns)",
    "topk_k": "[shortest, longest] top-k list read (null without top-k columns)",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "What DVP's pruning would remove", "P1, P2, P4",
                  lambda ctx, d: dvp(ctx.acc, d, ctx.complete), DvpSums, _figure,
                  summary=SUMMARY)
