"""Streaming statistics of per-token dumps for ``tailtheory diagnose`` (M3-M6, T12, P2/P4).

Source: DVP (arXiv 2512.23087) for ``Delta`` and its (1-p) law, the tail bias and the pruning
rule; TRM (arXiv 2512.23075) for the k2 / k3 sequence filters; TIM (arXiv 2605.14220) for k1/k3.
Sign: ``Delta = log pi_roll - log pi_train = k1(log_rho)`` (inference minus trainer,
:mod:`tailtheory.mismatch.logprob`); ``p = pi_train`` of the sampled token.

Every per-token quantity is computed per batch with the toolkit's functions (``k1``, ``k2``,
``k3``, ``sequence_log_ratio``, ``safe_vocab_mask``, ``pruned_mass``) and summed into
accumulators of fixed size: per log10-p bin (count, sums of ``Delta``, ``Delta^2``, ``|Delta|``,
max ``|Delta|``, implied ``eps``), histograms of ``(log10 p, log10 |Delta|)`` and of
``log10 eps``, per step, and per response (keyed by file, step and ``sample_id``: tokens, tail
tokens, ``sum log rho``, max k2, sum k3, the DVP pruned mass). A dump is read once, in batches.

Shapes: a batch of ``n`` token rows, ``(n,)``; per-response arrays ``(S,)``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from tailtheory.core.estimators import k1, k2, k3
from tailtheory.diagnose.columns import TOPK_MASS_TOL
from tailtheory.diagnose.faults import FaultScan
from tailtheory.diagnose.read import Batch
from tailtheory.mismatch.accumulation import sequence_log_ratio
from tailtheory.pruning.vocab import pruned_mass, safe_vocab_mask

P_EDGES = np.linspace(-8.0, 0.0, 33)
"""log10 p bin edges (4 per decade); p below 1e-8 falls in the first bin."""
ABS_EDGES = np.linspace(-9.0, 1.0, 41)
"""log10 |Delta| edges of the (p, |Delta|) histogram; values outside are clamped in."""
EPS_EDGES = np.linspace(-10.0, 2.0, 241)
"""log10 eps edges of the implied-eps histogram (0.05 decade: its quantiles' resolution)."""
BIN_FIELDS = ("n", "sum_d", "sum_d2", "sum_abs", "max_abs", "sum_p", "sum_eps", "n_eps")
"""Per-bin sums: tokens, Delta, Delta^2, |Delta|, max |Delta|, p, implied eps (finite ones)."""
SEQ_FIELDS = ("file", "step", "n_all", "n_tok", "n_tail", "log_ratio", "max_k2", "sum_k3",
              "pos_min", "pos_max", "excluded", "reward")
"""Per-response accumulators (``log_ratio = sum_t log rho_t``, M6's ``-sum_t Delta_t``)."""
REST_NEGLIGIBLE = 1e-9
"""Mass outside a top-k list below which the list counts as the full distribution."""
STEP_FIELDS = ("n", "sum_k1", "sum_k3", "sum_abs", "max_abs")
"""Per-step sums."""
RHO_GRID = np.unique(np.concatenate([np.logspace(np.log10(1.001), 3, 31), [2.0]]))
"""Thresholds ``c > 1`` of the ratio section's tail curve: the share of tokens with ``rho > c``
and with ``rho < 1 / c`` (``c = 2`` included: the TIS cap and the band's edges)."""
RATIO_FIELDS = ("n", "sum_rho", "tis_truncated", "band_masked", "sum_k3_clamped",
                "sum_k3_outside", "max_log_rho", "min_log_rho")
"""Sums of the importance-ratio section: tokens, rho, tokens with rho above the TIS cap and
outside the IcePop band, the clamped k3, the k3 of tokens outside the band, extreme log rho."""


def implied_eps(p, abs_delta) -> np.ndarray:
    """The smallest ``eps`` under which M3's exact bound covers a token's ``|Delta|``.

    Source: DVP (M3). Inverts ``|Delta| = log(1 + (1 - p)(e^{2 eps} - 1))``:
    ``eps = log1p(expm1(|Delta|) / (1 - p)) / 2``, so that
    ``mismatch_bound(p, implied_eps(p, |Delta|), "exact") == |Delta|``. A token with only its
    sampled log-probs cannot give M3's ``eps`` (the logits' half-range); it gives this lower
    bound on it. ``inf`` where ``p = 1`` and ``|Delta| > 0``; 0 where ``|Delta| = 0``.

    Shapes: p, abs_delta (n,) -> (n,) float64.
    """
    p, a = np.asarray(p, np.float64), np.asarray(abs_delta, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = np.where(a > 0, np.expm1(a) / (1.0 - p), 0.0)
    return 0.5 * np.log1p(x)


def ratio_caps() -> dict[str, float]:
    """The caps of the engine's corrections (``tailtheory.engine.types.MethodParams``, TIM V4):
    TIS's ``tis_cap`` and ``seq_tis_cap``, IcePop's token band ``[icepop_low, icepop_high]``,
    MIS's sequence band ``[mis_low, mis_high]``."""
    from tailtheory.engine.types import MethodParams

    hp = MethodParams()
    return dict(tis_cap=hp.tis_cap, seq_tis_cap=hp.seq_tis_cap, band_low=hp.icepop_low,
                band_high=hp.icepop_high, mis_low=hp.mis_low, mis_high=hp.mis_high)


def clamped_k3(log_rho: np.ndarray, low: float, high: float) -> np.ndarray:
    """k3 of the ratio clamped to the band: ``r - 1 - log r`` with ``r = clip(rho, low, high)``,
    so one token with a huge ratio adds at most k3 at the band's edge. Shapes: (n,) -> (n,)."""
    lr = np.clip(log_rho, math.log(low), math.log(high))
    return np.expm1(lr) - lr


class Accumulator:
    """Streaming sums over batches of :class:`~tailtheory.diagnose.read.Batch`.

    ``tail_p`` / ``head_p``: trainer-probability cut-offs of tail / head tokens; ``rhos``: DVP's
    min-p ratios; ``delta_max``: TRM's k2 threshold for the per-token violation rate ``q``;
    ``kinds``: each file's kind (``engine`` / ``generic``), to name its columns in errors. The
    fault checks' sums are :attr:`faults` (:class:`~tailtheory.diagnose.faults.FaultScan`).
    """

    def __init__(self, files: list[Path], tail_p: float, head_p: float, rhos: tuple[float, ...],
                 delta_max: float, kinds: list[str] | None = None):
        self.files, self.tail_p, self.head_p = files, tail_p, head_p
        self.faults = FaultScan(files, kinds)
        self.caps = ratio_caps()
        self.ratios = dict.fromkeys(RATIO_FIELDS, 0.0)
        self.ratios.update(max_log_rho=-math.inf, min_log_rho=math.inf)
        self.rho_above, self.rho_below = np.zeros(len(RHO_GRID)), np.zeros(len(RHO_GRID))
        self.topk_len = [math.inf, 0]                    # shortest and longest top-k list
        self.rhos, self.delta_max = tuple(rhos), delta_max
        nb = len(P_EDGES) - 1
        self.bins = {f: np.zeros(nb) for f in BIN_FIELDS}
        self.groups = {g: dict.fromkeys(BIN_FIELDS, 0.0) for g in ("head", "tail", "adv_pos",
                                                                   "adv_neg", "all")}
        self.hist = np.zeros((nb, len(ABS_EDGES) - 1))
        self.eps_hist, self.eps_max, self.eps_undefined = np.zeros(len(EPS_EDGES) - 1), 0.0, 0
        self.sum_k1 = self.sum_k3 = 0.0
        self.violations, self.r_max = 0, None
        self.excluded_rows, self.excluded_by_column = 0, {}
        self.steps: dict[int, np.ndarray] = {}
        self.keys: dict[tuple, int] = {}
        self.sample_ids: list = []
        self.seq = {f: np.zeros(0) for f in SEQ_FIELDS}
        self.seq_mass = np.zeros((0, len(self.rhos)))
        self.dvp = {f: np.zeros(len(self.rhos)) for f in ("n", "pruned", "abs_pruned", "abs_all",
                                                          "mass", "mass_max", "mass_train",
                                                          "exact")}
        self.dvp_side: str | None = None

    @property
    def n_seq(self) -> int:
        return len(self.sample_ids)

    # --- per batch -----------------------------------------------------------------------------

    def add(self, b: Batch) -> None:
        """Fold one batch in; raises ``ValueError`` on a repeated or negative position."""
        idx = self._seq_index(b)
        self._check_positions(b, idx)
        s, n = self.seq, self.n_seq
        s["n_all"][:n] += np.bincount(idx, minlength=n)
        np.minimum.at(s["pos_min"], idx, b.position)
        np.maximum.at(s["pos_max"], idx, b.position)
        if b.reward is not None:
            s["reward"][idx] = b.reward
            finite = b.reward[np.isfinite(b.reward)]
            if len(finite):
                self.r_max = max(self.r_max or 0.0, float(np.abs(finite).max()))
        if (~b.ok).any():
            s["excluded"][idx[~b.ok]] = 1
            self.excluded_rows += int((~b.ok).sum())
            for c, k in b.bad.items():
                self.excluded_by_column[c] = self.excluded_by_column.get(c, 0) + k
        self.faults.add(b, idx)
        if b.ok.any():
            self._tokens(b, idx)

    def _tokens(self, b: Batch, idx: np.ndarray) -> None:
        ok = b.ok
        idx, log_rho = idx[ok], torch.from_numpy(b.log_rho[ok])
        Delta = k1(log_rho).numpy()                          # log pi_roll - log pi_train
        lp = np.minimum(b.logp_train[ok], 0.0)
        p, q = np.exp(lp), -np.expm1(lp)                     # p and 1 - p, both accurate
        a = np.abs(Delta)
        eps = implied_eps(p, a)
        kk2, kk3 = k2(log_rho).numpy(), k3(log_rho).numpy()
        self.sum_k1 += float(Delta.sum())
        self.sum_k3 += float(kk3.sum())
        self.violations += int((kk2 > self.delta_max).sum())
        bin_ = np.clip(np.digitize(np.log10(np.maximum(p, 1e-300)), P_EDGES) - 1, 0,
                       len(P_EDGES) - 2)
        self._fold_bins(bin_, Delta, a, p, eps)
        tail = p < self.tail_p
        groups = {"all": slice(None), "head": p > self.head_p, "tail": tail}
        if b.advantage is not None:
            adv = b.advantage[ok]
            groups.update(adv_pos=adv > 0, adv_neg=adv < 0)
        for g, sel in groups.items():
            self._fold_group(self.groups[g], Delta[sel], a[sel], p[sel], eps[sel])
        la = np.clip(np.log10(np.maximum(a, 1e-300)), ABS_EDGES[0], ABS_EDGES[-1] - 1e-9)
        self.hist += np.histogram2d(bin_, la, bins=(np.arange(len(P_EDGES)), ABS_EDGES))[0]
        fin = np.isfinite(eps)
        self.eps_undefined += int((~fin).sum())
        le = np.clip(np.log10(np.maximum(eps[fin], 1e-300)), EPS_EDGES[0], EPS_EDGES[-1] - 1e-9)
        self.eps_hist += np.histogram(le, bins=EPS_EDGES)[0]
        if fin.any():
            self.eps_max = max(self.eps_max, float(eps[fin].max()))
        s, n = self.seq, self.n_seq
        s["n_tok"][:n] += np.bincount(idx, minlength=n)
        s["n_tail"][:n] += np.bincount(idx, weights=tail, minlength=n)
        contrib = sequence_log_ratio(torch.from_numpy(Delta)[:, None]).numpy()  # -Delta_t
        s["log_ratio"][:n] += np.bincount(idx, weights=contrib, minlength=n)
        s["sum_k3"][:n] += np.bincount(idx, weights=kk3, minlength=n)
        np.maximum.at(s["max_k2"], idx, kk2)
        self._fold_steps(b.step[ok], Delta, a, kk3)
        self._fold_ratios(b.log_rho[ok], kk3)
        side = b.topk_roll if b.topk_roll is not None else b.topk_train
        if side is not None:
            self._fold_dvp(b, idx, Delta)

    def _fold_ratios(self, log_rho: np.ndarray, kk3: np.ndarray) -> None:
        """The importance ratios ``rho = exp(log_rho)`` against the corrections' caps."""
        c, r = self.caps, self.ratios
        out = (log_rho < math.log(c["band_low"])) | (log_rho > math.log(c["band_high"]))
        r["n"] += len(log_rho)
        r["sum_rho"] += float(np.exp(log_rho).sum())
        r["tis_truncated"] += int((log_rho > math.log(c["tis_cap"])).sum())
        r["band_masked"] += int(out.sum())
        r["sum_k3_clamped"] += float(clamped_k3(log_rho, c["band_low"], c["band_high"]).sum())
        r["sum_k3_outside"] += float(kk3[out].sum())
        if len(log_rho):
            r["max_log_rho"] = max(r["max_log_rho"], float(log_rho.max()))
            r["min_log_rho"] = min(r["min_log_rho"], float(log_rho.min()))
        lg, srt = np.log(RHO_GRID), np.sort(log_rho)
        self.rho_above += len(srt) - np.searchsorted(srt, lg, side="right")
        self.rho_below += np.searchsorted(srt, -lg, side="left")

    def _fold_bins(self, bin_, Delta, a, p, eps) -> None:
        nb, fin = len(P_EDGES) - 1, np.isfinite(eps)
        for f, w in (("n", None), ("sum_d", Delta), ("sum_d2", Delta ** 2), ("sum_abs", a),
                     ("sum_p", p)):
            self.bins[f] += np.bincount(bin_, weights=w, minlength=nb)
        self.bins["sum_eps"] += np.bincount(bin_[fin], weights=eps[fin], minlength=nb)
        self.bins["n_eps"] += np.bincount(bin_[fin], minlength=nb)
        np.maximum.at(self.bins["max_abs"], bin_, a)

    @staticmethod
    def _fold_group(g: dict, Delta, a, p, eps) -> None:
        fin = np.isfinite(eps)
        g["n"] += len(Delta)
        g["sum_d"] += float(Delta.sum())
        g["sum_d2"] += float((Delta ** 2).sum())
        g["sum_abs"] += float(a.sum())
        g["sum_p"] += float(p.sum())
        g["sum_eps"] += float(eps[fin].sum())
        g["n_eps"] += int(fin.sum())
        if len(a):
            g["max_abs"] = max(g["max_abs"], float(a.max()))

    def _fold_steps(self, step, Delta, a, kk3) -> None:
        uniq, inv = np.unique(step, return_inverse=True)
        sums = [np.bincount(inv), np.bincount(inv, weights=Delta), np.bincount(inv, weights=kk3),
                np.bincount(inv, weights=a)]
        mx = np.zeros(len(uniq))
        np.maximum.at(mx, inv, a)
        for j, st in enumerate(uniq.tolist()):
            row = self.steps.setdefault(st, np.zeros(len(STEP_FIELDS)))
            row[:4] += [x[j] for x in sums]
            row[4] = max(row[4], mx[j])

    def _fold_dvp(self, b: Batch, idx: np.ndarray, Delta: np.ndarray) -> None:
        """DVP's min-p set ``S`` from the sampler's top-k list (else the trainer's), per rho:
        whether the sampled token lies outside ``S`` and the pruned mass ``m = 1 - pi(S)``
        (an upper bound when the list stops before the cut-off)."""
        ok = b.ok
        roll = b.topk_roll is not None
        side = (b.topk_roll if roll else b.topk_train)[ok]
        sampled = (b.logp_train - b.log_rho)[ok] if roll else b.logp_train[ok]
        self.dvp_side = "rollout" if roll else "train"
        a = np.abs(Delta)
        row = torch.from_numpy(np.concatenate([side, sampled[:, None]], 1))      # (n, k+1)
        over = sampled > side.max(1) + np.log1p(TOPK_MASS_TOL)
        if over.any():
            raise ValueError(f"{self.files[b.file]}: the sampled token's log-prob exceeds the "
                             f"largest entry of the top-k list in {int(over.sum())} row(s): the "
                             f"list must hold the k most likely tokens")
        k, n = side.shape[1], len(side)
        lens = (side > -np.inf).sum(1)
        self.topk_len = [min(self.topk_len[0], int(lens.min())),
                         max(self.topk_len[1], int(lens.max()))]
        smallest = np.argmin(np.where(side > -np.inf, side, np.inf), 1)   # the list's last token
        both = roll and b.topk_train is not None
        rest, rest_train = _rest(side), (_rest(b.topk_train[ok]) if both else None)
        for r, rho in enumerate(self.rhos):
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
            self.seq_mass[:self.n_seq, r] += np.bincount(idx, weights=m, minlength=self.n_seq)

    # --- responses ---------------------------------------------------------------------------

    def _seq_index(self, b: Batch) -> np.ndarray:
        """Dense index of each row's response, keyed by (file, step, sample_id)."""
        import pandas as pd

        codes, uniq = pd.factorize(pd.MultiIndex.from_arrays([b.step, b.sample_id]))
        glob = np.empty(len(uniq), np.int64)
        for j, (st, sid) in enumerate(uniq):
            key = (b.file, int(st), sid if isinstance(sid, str) else int(sid))
            g = self.keys.get(key)
            if g is None:
                g = self.keys[key] = self.n_seq
                self.sample_ids.append(key[2])
                self._grow()
                self.seq["file"][g], self.seq["step"][g] = b.file, key[1]
            glob[j] = g
        return glob[codes]

    def _grow(self) -> None:
        n = self.n_seq
        if n <= len(self.seq["n_all"]):
            return
        cap = max(2 * len(self.seq["n_all"]), 1024)
        for f, v in self.seq.items():
            fill = {"pos_min": np.inf, "pos_max": -np.inf, "reward": np.nan}.get(f, 0.0)
            self.seq[f] = np.concatenate([v, np.full(cap - len(v), fill)])
        self.seq_mass = np.concatenate([self.seq_mass,
                                        np.zeros((cap - len(self.seq_mass), len(self.rhos)))])

    def _where(self, g: int) -> str:
        return (f"{self.files[int(self.seq['file'][g])]}: sample_id {self.sample_ids[g]!r} "
                f"(step {int(self.seq['step'][g])})")

    def _check_positions(self, b: Batch, idx: np.ndarray) -> None:
        if (b.position < 0).any():
            g = idx[np.flatnonzero(b.position < 0)[0]]
            raise ValueError(f"{self._where(g)} has a negative position")
        order = np.lexsort((b.position, idx))
        si, sp = idx[order], b.position[order]
        dup = np.flatnonzero((si[1:] == si[:-1]) & (sp[1:] == sp[:-1]))
        if len(dup):
            raise ValueError(f"{self._where(si[dup[0]])}: position {sp[dup[0]]} repeats; "
                             f"positions must be distinct within a response")

    def check_complete(self) -> None:
        """After the last batch: a response with more rows than its span of positions has a
        repeat that crossed batches (pigeonhole). Raises ``ValueError``."""
        s, n = self.seq, self.n_seq
        over = np.flatnonzero(s["n_all"][:n] > s["pos_max"][:n] - s["pos_min"][:n] + 1)
        if len(over):
            g = over[0]
            span = int(s["pos_max"][g] - s["pos_min"][g] + 1)
            raise ValueError(f"{self._where(g)}: {int(s['n_all'][g])} rows but positions span "
                             f"only {span}: a position repeats")


def _rest(side: np.ndarray) -> np.ndarray:
    """``log(1 - sum of the list's probabilities)``; ``-inf`` when the list holds all but
    :data:`REST_NEGLIGIBLE` of the mass (a full distribution, up to rounding)."""
    rest = -np.expm1(np.logaddexp.reduce(side, axis=1))
    with np.errstate(divide="ignore"):
        return np.where(rest > REST_NEGLIGIBLE, np.log(np.maximum(rest, REST_NEGLIGIBLE)), -np.inf)
