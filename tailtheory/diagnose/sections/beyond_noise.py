"""Samples beyond the run's numerical noise: M3's envelope at the noise level the run itself
shows, and the samples whose tokens exceed it more often than the run's other samples do.

Source: DVP (arXiv 2512.23087; M3): a logit perturbation of half-range ``eps`` moves a token's
log-prob by at most ``|Delta| <= log(1 + (1 - p)(e^{2 eps} - 1))``. A run's own numerical noise
(bf16 or fp16 arithmetic, kernels, the KV cache) sets an ``eps``; a sample whose tokens lie
beyond that envelope more often than the run's other samples stands out from it. M3 cannot
name a cause: a temperature gap or stale weights everywhere are also logit perturbations, only
larger; what it finds is what lies *beyond this run's noise*, confined to some samples. The
candidates named are a different context, different weights or different sampling.

Per token (:func:`beyond_eps`): the ``eps`` at which M3's bound reaches ``|Delta|`` less the
storage quantum ``q`` (:mod:`tailtheory.diagnose.quantum`), with ``1 - p = -expm1(log p)`` in
float64 (exact near ``p = 1``, where the envelope is tightest). A token beyond the envelope at
``eps_hat`` is one whose ``eps`` is at least ``eps_hat``: ``|Delta| > bound(p, eps_hat) + q``.

The run's noise level (:func:`noise_level`), with samples as units: each sample's median
token ``eps`` (its noise statistic), their median across samples (the centre) and
``MAD_SD x`` their median absolute deviation (the scale, in log10 ``eps``, at least one bin),
and ``log10 eps_hat = centre + K x scale``. Up to half the samples may lie beyond without
moving the centre, so a contaminated minority (20% in the tests) cannot hide itself by
raising the envelope, while a heavy-tailed clean run widens the scale with it; a high quantile
of all tokens does neither (a 20% minority sets it). :data:`K` is chosen by the false-alarm
test over simulated clean dumps (``tests/diagnose/sections/test_beyond_noise.py``).

Per sample (:func:`sample_tests`): its tokens beyond ``eps_hat`` against the run's rate ``r0``,
pooled over the samples within the noise (median ``eps`` at most ``eps_hat``), a one-sided
beta-binomial test whose intra-sample correlation ``rho`` is estimated from those samples by
moments (clean samples differ in their noise: a binomial test flags that heterogeneity, in 16%
of the test's 200 clean simulated dumps against 1%); Benjamini-Hochberg at :data:`ALPHA`
across samples (:func:`bh`). Flagged samples are listed with their share of the run's mismatch
(sum of k3).

Beside it, three run-wide checks (:mod:`tailtheory.diagnose.sections.noise_checks`):
``rounding``, ``temperature`` and ``truncation``.

Streaming: one pass cannot know ``eps_hat`` before every token is read, so each sample keeps a
histogram of its tokens' ``eps`` over :data:`EDGES` (0.1 decade, 122 int32 counts) and their
sum of k3 (496 bytes per sample), from which its median and its tokens beyond any grid value
are read after the last batch; ``eps_hat`` is rounded up to a grid edge, so the counts beyond
it are exact. The storage quantum of a JSON lines file is read from its first rows (a second
read of those rows only), of a parquet or ``.pt`` file from its stored dtype
(:func:`~tailtheory.diagnose.quantum.dump_storage`).

Shapes: a batch of ``n`` token rows, ``(n,)``; per sample ``(S,)``, histograms ``(S, NB)``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from tailtheory.diagnose.aggregate import EPS_EDGES
from tailtheory.diagnose.quantum import dump_storage, quantum_of, storage_words
from tailtheory.diagnose.sections.base import Diagnosis, Section, num, plural
from tailtheory.diagnose.sections.noise_checks import CHECK_SUMS, check_line, run_checks
from tailtheory.diagnose.sections.resume import MAD_SD

NAME = "beyond_noise"

EDGES = EPS_EDGES[::2]
"""log10 ``eps`` edges of each sample's histogram (0.1 decade from 1e-10 to 1e2); column 0
holds ``eps`` below the first edge (0 included), the last column ``eps`` at or above the last
(``inf`` included)."""
NB = len(EDGES) + 1
"""Columns of a sample's histogram."""
STEP = float(EDGES[1] - EDGES[0])
"""Width of a histogram bin in log10 ``eps``: the smallest scale across samples."""
SAMPLE_Q = 0.5
"""Each sample's noise statistic: this quantile (the median) of its tokens' ``eps``, robust to
the few tokens of a clean sample that reach far."""
K = 4.0
"""``log10 eps_hat = centre + K x scale``, chosen by the false-alarm test's simulation (real
bf16, fp16 and KV paths of two tiny models, Student-t noise): over 600 clean dumps a sample is
flagged in 14% (K = 2), 8% (3), 3% (4) and 2% (5) of them, and a context shifted in 5% of the
samples is found at 0.995, 0.995, 0.985 and 0.96; in 20%, at 0.985-0.97. K = 4 is the smallest
that keeps the false alarms within BH's 5% (a slow test pins it)."""
ALPHA = 0.05
"""Benjamini-Hochberg's false discovery rate across samples."""
RHO_MAX = 0.99
"""Largest intra-sample correlation the beta-binomial test takes."""
LISTED = 20
"""Flagged samples listed in ``summary.json`` (smallest p first); the table has them all."""
SHOWN = 5
"""Flagged samples named in the verdict's line."""


# --- per token -------------------------------------------------------------------------------

def beyond_eps(logp, abs_delta, quantum) -> np.ndarray:
    """The smallest ``eps`` whose M3 envelope, widened by ``quantum``, covers ``|Delta|``.

    Source: DVP (M3). ``eps = log1p(expm1(a) / (1 - p)) / 2`` with ``a = max(|Delta| - q, 0)``
    and ``1 - p = -expm1(log p)`` in float64, so ``|Delta| <= bound(p, eps) + q`` exactly at
    it; 0 where ``a = 0``, ``inf`` where ``p = 1`` and ``a > 0``.

    Shapes: logp, abs_delta, quantum (n,) -> (n,) float64.
    """
    a = np.maximum(np.asarray(abs_delta, np.float64) - quantum, 0.0)
    one_minus_p = 0.0 - np.expm1(np.minimum(np.asarray(logp, np.float64), 0.0))  # +0 at p = 1
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = np.where(a > 0, np.expm1(a) / one_minus_p, 0.0)
    return 0.5 * np.log1p(x)


def eps_columns(eps) -> np.ndarray:
    """The histogram column of each ``eps`` (:data:`EDGES`). Shapes: (n,) -> (n,) int."""
    with np.errstate(divide="ignore"):
        return np.searchsorted(EDGES, np.log10(eps), side="right")


# --- the noise level and the tests ----------------------------------------------------------

def sample_statistic(H: np.ndarray, q: float = SAMPLE_Q) -> np.ndarray:
    """Each sample's ``q``-quantile of its tokens' ``eps`` in log10, the upper edge of the
    column holding it (one bin above the last edge beyond the grid). Shapes: H (S, NB) -> (S,)."""
    n = H.sum(1)
    col = (np.cumsum(H, 1) < q * n[:, None]).sum(1)
    return np.append(EDGES, EDGES[-1] + STEP)[np.minimum(col, NB - 1)]


def noise_level(s: np.ndarray, k: float = K) -> dict:
    """The run's noise level from each sample's statistic ``s`` (log10): ``centre`` (median),
    ``scale`` (``MAD_SD x`` median absolute deviation, at least :data:`STEP`), ``edge`` (the
    index of the first edge at or above ``centre + k x scale``) and ``eps_hat = 10^EDGES[edge]``.
    Shapes: s (S,) -> dict."""
    centre = float(np.median(s))
    scale = max(MAD_SD * float(np.median(np.abs(s - centre))), STEP)
    edge = min(int(np.searchsorted(EDGES, centre + k * scale - 1e-9)), len(EDGES) - 1)
    return {"centre": centre, "scale": scale, "edge": edge, "eps_hat": float(10 ** EDGES[edge])}


def bh(p_values, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini-Hochberg: ``(p_adjusted, rejected)`` in input order. Sorted ascending,
    ``p_adj(i) = min_{j >= i} min(1, m p_(j) / j)``; ``rejected``: ``p_adj <= alpha``. Controls
    the false discovery rate at ``alpha`` for independent tests (Benjamini and Hochberg 1995,
    J. R. Statist. Soc. B 57:289-300). Shapes: (m,) -> (m,), (m,)."""
    p = np.asarray(p_values, np.float64)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)) or not 0 < alpha < 1:
        raise ValueError(f"bh needs p-values in [0, 1] (a 1-D array) and 0 < alpha < 1, got "
                         f"shape {p.shape} and alpha {alpha}")
    m = len(p)
    order = np.argsort(p, kind="stable")
    adj = np.empty(m)
    adj[order] = np.minimum.accumulate((m * p[order] / np.arange(1, m + 1))[::-1])[::-1]
    adj = np.minimum(adj, 1.0)
    return adj, adj <= alpha


def sample_tests(H: np.ndarray, edge: int, s: np.ndarray) -> dict:
    """Each sample's tokens beyond ``eps_hat = 10^EDGES[edge]`` against the run's rate.

    ``r0``: the share of tokens beyond, pooled over the samples within the noise (``s <=
    EDGES[edge]``), with one pseudo-count each way; ``rho``: their intra-sample correlation by
    moments, ``sum[(v - n r0)^2 - n r0 (1 - r0)] / (r0 (1 - r0) sum n (n - 1))`` in ``[0,
    RHO_MAX]``; ``p``: the beta-binomial (binomial at ``rho = 0``) chance of at least ``v``
    tokens beyond of ``n``. Returns ``tokens``, ``beyond``, ``r0``, ``rho``, ``p``. Shapes:
    H (S, NB), s (S,) -> arrays (S,)."""
    n, v = H.sum(1), H[:, edge + 1:].sum(1)
    inside = s <= EDGES[edge] + 1e-9
    ni, vi = n[inside], v[inside]
    r0 = (vi.sum() + 1.0) / (ni.sum() + 2.0)
    den = r0 * (1 - r0) * float((ni * (ni - 1.0)).sum())
    rho = float(np.clip(((vi - ni * r0) ** 2 - ni * r0 * (1 - r0)).sum() / den, 0, RHO_MAX)) \
        if den > 0 else 0.0
    if rho > 0:
        a, b = r0 * (1 - rho) / rho, (1 - r0) * (1 - rho) / rho
        p = stats.betabinom.sf(v - 1, n, a, b)
    else:
        p = stats.binom.sf(v - 1, n, r0)
    return {"tokens": n, "beyond": v, "r0": float(r0), "rho": rho,
            "p": np.where(v > 0, np.clip(p, 0.0, 1.0), 1.0)}


def beyond_noise(H: np.ndarray, k: float = K, alpha: float = ALPHA) -> dict:
    """The run's noise level (:func:`noise_level` of :func:`sample_statistic`) and each
    sample's test (:func:`sample_tests`), Benjamini-Hochberg at ``alpha`` (:func:`bh`): the
    keys of both, ``s`` (each sample's statistic), ``p_adjusted`` and ``flagged``. Shapes:
    H (S, NB) -> dict of scalars and (S,) arrays. Raises ``ValueError`` on another shape,
    negative counts, a sample without tokens or ``k <= 0``."""
    H = np.asarray(H)
    if H.ndim != 2 or H.shape[0] < 1 or H.shape[1] != NB or (H < 0).any() or \
            not (H.sum(1) > 0).all() or not k > 0:
        raise ValueError(f"beyond_noise needs per-sample counts of shape (S >= 1, {NB}), "
                         f">= 0, every sample with a token, and k > 0; got shape {H.shape}, "
                         f"k {k}")
    s = sample_statistic(H)
    level = noise_level(s, k)
    t = sample_tests(H, level["edge"], s)
    adj, flagged = bh(t["p"], alpha)
    return {**level, **t, "s": s, "p_adjusted": adj, "flagged": flagged}


# --- the section -----------------------------------------------------------------------------

class NoiseSums:
    """Per sample, the histogram of its tokens' ``eps`` (:func:`beyond_eps`, ``(S, NB)``
    int32) and their sum of k3 (``(S,)``); per file, how it stores its log-probs
    (:func:`~tailtheory.diagnose.quantum.dump_storage`); the run-wide sums of
    the checks (:data:`CHECK_SUMS`)."""

    def __init__(self, acc):
        self.acc = acc
        self.H = np.zeros((0, NB), np.int32)
        self.k3 = np.zeros(0)
        self.storage: dict[int, str] = {}
        self.sums = dict.fromkeys(CHECK_SUMS, 0.0)

    def add(self, t) -> None:
        """Fold one batch's tokens in."""
        b = t.batch
        train = b.logp_train[b.ok]
        if b.file not in self.storage:
            dumps = self.acc.dumps
            dump = dumps[b.file] if b.file < len(dumps) else None
            self.storage[b.file] = dump_storage(dump, b)
        q = quantum_of(self.storage[b.file], train, train - t.log_rho)
        logp = np.minimum(train, 0.0)
        n = self.acc.n_seq
        if len(self.H) < n:
            cap = max(2 * len(self.H), n, 1024)
            self.H = np.concatenate([self.H, np.zeros((cap - len(self.H), NB), np.int32)])
            self.k3 = np.concatenate([self.k3, np.zeros(cap - len(self.k3))])
        np.add.at(self.H, (t.idx, eps_columns(beyond_eps(logp, t.a, q))), 1)
        self.k3[:n] += np.bincount(t.idx, weights=t.kk3, minlength=n)
        d, s = t.Delta, self.sums
        for key, v in (("n", len(d)), ("sx", logp.sum()), ("sxx", (logp * logp).sum()),
                       ("sd", d.sum()), ("sdd", (d * d).sum()), ("sxd", (logp * d).sum()),
                       ("pos", (d > q).sum()), ("neg", (d < -q).sum())):
            s[key] += float(v)


def beyond_noise_section(acc, d: Diagnosis, s: dict, dtype: str | None = None) -> None:
    """The run's noise level and the samples beyond it (:func:`beyond_noise`) over the
    complete samples ``s`` (:func:`~tailtheory.diagnose.sections.base.complete`), the run-wide
    checks (:func:`run_checks`; ``dtype``: the rollout engine's declared precision, ``--dtype``,
    else the dump's stored half precision, else bfloat16 assumed): ``d.summary["beyond_noise"]``, the table ``beyond_noise`` (one
    row per sample) and the verdict lines."""
    f, idx = acc.folds[NAME], s["index"]
    kinds = list(dict.fromkeys(f.storage[i] for i in sorted(f.storage)))
    lacks = [{"file": str(x.path), "columns": ["step"]} for x in acc.dumps if "step" in x.lacks]
    if not len(idx):
        d.summary[NAME] = None
        d.verdicts[NAME] = ["no complete sample: the run's noise level cannot be read."]
        return
    r = beyond_noise(f.H[idx].astype(np.int64))
    k3 = f.k3[idx]
    share = k3 / k3.sum() if k3.sum() > 0 else np.full(len(k3), math.nan)
    sids = [acc.sample_ids[i] for i in idx]
    t = pd.DataFrame({"file": [str(acc.files[int(i)]) for i in s["file"]],
                      "step": s["step"].astype(int), "sample_id": sids,
                      "tokens": r["tokens"], "beyond": r["beyond"],
                      "median_eps": 10 ** r["s"], "p": r["p"], "p_adjusted": r["p_adjusted"],
                      "flagged": r["flagged"], "k3_share": share})
    d.tables[NAME] = t
    flagged = t[t.flagged].sort_values("p", kind="stable")
    declared = dtype or next((k for k in kinds if k in ("bfloat16", "float16")), None)
    d.summary[NAME] = {
        "eps_hat": r["eps_hat"], "centre_eps": float(10 ** r["centre"]),
        "scale_decades": r["scale"], "k": K, "sample_quantile": SAMPLE_Q,
        "precision": [storage_words(k) for k in kinds], "samples": len(t),
        "tokens": int(t.tokens.sum()), "beyond_tokens": int(t.beyond.sum()),
        "run_rate": r["r0"], "rho": r["rho"], "alpha": ALPHA,
        "flagged_samples": len(flagged), "flagged_k3_share": float(flagged.k3_share.sum()),
        "flagged": [{"step": int(x.step), "sample_id": x.sample_id, "file": x.file,
                     "tokens": int(x.tokens), "beyond": int(x.beyond), "p": float(x.p),
                     "p_adjusted": float(x.p_adjusted), "k3_share": float(x.k3_share)}
                    for x in flagged.head(LISTED).itertuples()],
        "checks": run_checks(r["eps_hat"], f.sums, declared, "declared" if dtype else "stored"),
        "lacks": lacks}
    d.verdicts[NAME] = beyond_noise_lines(d.summary[NAME])


def beyond_noise_lines(r: dict) -> list[str]:
    """The section's summary in words: the noise level, the samples beyond it, the checks."""
    pct = lambda x: f"{num(100 * x, '.3g')}%"  # noqa: E731
    lines = [f"the run's numerical noise: eps_hat = {num(r['eps_hat'])}, M3's envelope "
             f"{r['k']:g} robust sd ({num(r['scale_decades'], '.2g')} decades each) above the "
             f"median over {plural(r['samples'], 'sample')} of each sample's median token eps "
             f"({num(r['centre_eps'])}), widened by the storage quantum "
             f"({'; '.join(r['precision'])}); {r['beyond_tokens']} of "
             f"{plural(r['tokens'], 'token')} lie beyond it, at a rate of {num(r['run_rate'])} "
             f"in the samples within the noise (intra-sample correlation "
             f"{num(r['rho'], '.2g')})."]
    fl = r["flagged"]
    if fl:
        shown = "; ".join(f"step {x['step']}, sample {x['sample_id']} ({x['beyond']} of "
                          f"{plural(x['tokens'], 'token')} beyond, {pct(x['k3_share'])} of the "
                          f"mismatch)" for x in fl[:SHOWN])
        more = f"; and {r['flagged_samples'] - SHOWN} more" if r["flagged_samples"] > SHOWN \
            else ""
        lines.append(f"{plural(r['flagged_samples'], 'sample')} beyond this run's numerical "
                     f"noise (candidates: different context, weights or sampling), "
                     f"Benjamini-Hochberg at {r['alpha']:g} over {r['samples']} samples, "
                     f"carrying {pct(r['flagged_k3_share'])} of the run's mismatch (sum of k3): "
                     f"{shown}{more}.")
    else:
        lines.append(f"no sample beyond this run's numerical noise (Benjamini-Hochberg at "
                     f"{r['alpha']:g} over {plural(r['samples'], 'sample')}).")
    lines.extend(check_line(c) for c in r["checks"])
    if r["lacks"]:
        files = [x["file"] for x in r["lacks"]]
        lines.append(f"no column step in {plural(len(files), 'file')} ({', '.join(files[:3])}"
                     f"{', ...' if len(files) > 3 else ''}): their samples are told apart by "
                     f"sample_id alone.")
    return lines


def _figure(d: Diagnosis, plt):
    t, r = d.tables[NAME], d.summary[NAME]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    x = np.log10(t.median_eps.to_numpy())
    bins = np.arange(min(x.min(), math.log10(r["eps_hat"])) - STEP,
                     max(x.max(), math.log10(r["eps_hat"])) + 2 * STEP, STEP)
    fl = t.flagged.to_numpy(bool)
    a.hist([x[~fl], x[fl]], bins=bins, stacked=True, color=["C0", "C3"],
           label=["samples", "beyond the noise"])
    a.axvline(math.log10(r["centre_eps"]), color="k", ls=":", lw=1, label="centre")
    a.axvline(math.log10(r["eps_hat"]), color="k", ls="--", lw=1, label="eps_hat")
    a.set(xlabel="log10 of each sample's median token eps (M3)", ylabel="samples",
          title="Samples beyond the run's numerical noise")
    a.legend(fontsize=7)
    return fig, t


SUMMARY = {
    "beyond_noise": "the run's numerical noise and the samples beyond it (M3): eps_hat (M3's "
                    "envelope: the median over samples of each sample's median token eps, "
                    "centre_eps, + k robust sd, scale_decades, in log10), sample_quantile, "
                    "precision (how the dumps store their log-probs: the quantum the envelope "
                    "is widened by), samples, tokens, beyond_tokens, run_rate (the share "
                    "beyond within the noise), rho (intra-sample correlation), alpha "
                    "(Benjamini-Hochberg), flagged_samples, flagged_k3_share, flagged (step, "
                    "sample_id, file, tokens, beyond, p, p_adjusted, k3_share; the first 20), "
                    "checks (rounding, temperature, truncation: value, threshold, flagged) and "
                    "lacks (file, columns: the files without step); null without a complete "
                    "sample",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Samples beyond the run's numerical noise", "M3",
                  lambda ctx, d: beyond_noise_section(ctx.acc, d, ctx.complete, ctx.dtype), NoiseSums,
                  _figure, summary=SUMMARY)


def bottom_line_words(r: dict | None) -> list[str]:
    """What the bottom line adds from the section's summary ``r``: the samples beyond the
    run's noise, and the run-wide checks that are flagged; nothing when neither."""
    if not r:
        return []
    out = []
    if r["flagged_samples"]:
        x = r["flagged"][0]
        out.append(f"{plural(r['flagged_samples'], 'sample')} beyond this run's numerical noise "
                   f"(M3; {num(100 * r['flagged_k3_share'], '.3g')}% of its mismatch; first: "
                   f"step {x['step']}, sample {x['sample_id']}): check their context, weights "
                   f"and sampling")
    why = {"temperature": "Delta correlated with log p (a temperature mismatch)",
           "truncation": "Delta > 0 on nearly every token (a truncated sampler)"}
    run = [why.get(c["name"]) or f"a noise level beyond {c['dtype']}'s rounding of plausible "
           f"logits (eps_hat {num(r['eps_hat'])})" for c in r["checks"] if c["flagged"]]
    if run:
        out.append("run-wide: " + ", ".join(run))
    return out
