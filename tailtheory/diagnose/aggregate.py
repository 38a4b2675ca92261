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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tailtheory.core.estimators import k1, k2, k3
from tailtheory.diagnose.formats.base import Batch
from tailtheory.engine.types import MethodParams

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
    hp = MethodParams()
    return dict(tis_cap=hp.tis_cap, seq_tis_cap=hp.seq_tis_cap, band_low=hp.icepop_low,
                band_high=hp.icepop_high, mis_low=hp.mis_low, mis_high=hp.mis_high)


def clamped_k3(log_rho: np.ndarray, low: float, high: float) -> np.ndarray:
    """k3 of the ratio clamped to the band: ``r - 1 - log r`` with ``r = clip(rho, low, high)``,
    so one token with a huge ratio adds at most k3 at the band's edge. Shapes: (n,) -> (n,)."""
    lr = np.clip(log_rho, math.log(low), math.log(high))
    return np.expm1(lr) - lr


@dataclass
class Tokens:
    """One batch's included rows, with the per-token quantities every fold reads: ``batch``,
    ``rows`` (each row's response index, all rows), ``idx`` (the included rows'), and over the
    included rows ``log_rho``, ``Delta`` (``k1``), ``a = |Delta|``, ``p``, ``eps``
    (:func:`implied_eps`), ``kk2`` / ``kk3`` (``k2`` / ``k3``), ``bin_`` (the log10-p bin) and
    ``tail`` (``p < tail_p``). Shapes: ``(n,)``."""

    batch: Batch
    rows: np.ndarray
    idx: np.ndarray
    log_rho: np.ndarray
    Delta: np.ndarray
    a: np.ndarray
    p: np.ndarray
    eps: np.ndarray
    kk2: np.ndarray
    kk3: np.ndarray
    bin_: np.ndarray
    tail: np.ndarray


class Accumulator:
    """Streaming sums over batches of :class:`~tailtheory.diagnose.formats.base.Batch`.

    ``tail_p`` / ``head_p``: trainer-probability cut-offs of tail / head tokens; ``rhos``: DVP's
    min-p ratios; ``delta_max``: TRM's k2 threshold for the per-token violation rate ``q``;
    ``kinds``: each file's format, to name its columns in errors; ``dumps``: the opened files
    (:class:`~tailtheory.diagnose.formats.base.Dump`: how each stores its log-probs, what it
    lacks). The sums every section reads are kept here (per log10-p bin, per group of tokens,
    per response); ``sections`` (records of :mod:`tailtheory.diagnose.sections`) bring their
    own folds, whose running sums are :attr:`folds` (section name -> the object whose
    ``add(tokens)`` folds a batch in).
    """

    def __init__(self, files: list[Path], tail_p: float, head_p: float, rhos: tuple[float, ...],
                 delta_max: float, kinds: list[str] | None = None, sections=(), dumps=()):
        self.files, self.kinds, self.tail_p, self.head_p = files, kinds, tail_p, head_p
        self.dumps = list(dumps)
        self.rhos, self.delta_max = tuple(rhos), delta_max
        nb = len(P_EDGES) - 1
        self.bins = {f: np.zeros(nb) for f in BIN_FIELDS}
        self.groups = {g: dict.fromkeys(BIN_FIELDS, 0.0) for g in ("head", "tail", "adv_pos",
                                                                   "adv_neg", "all")}
        self.sum_k1 = self.sum_k3 = 0.0
        self.r_max = None
        self.excluded_rows, self.excluded_by_column = 0, {}
        self.keys: dict[tuple, int] = {}
        self.sample_ids: list = []
        self.seq = {f: np.zeros(0) for f in SEQ_FIELDS}
        self.seq_mass = np.zeros((0, len(self.rhos)))
        self.folds = {s.name: s.fold(self) for s in sections if s.fold is not None}

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
        if b.ok.any():
            t = self._tokens(b, idx)
            for fold in self.folds.values():
                fold.add(t)

    def _tokens(self, b: Batch, idx: np.ndarray) -> Tokens:
        """The per-token quantities of the included rows, folded into the shared sums."""
        ok = b.ok
        rows, idx, log_rho = idx, idx[ok], torch.from_numpy(b.log_rho[ok])
        Delta = k1(log_rho).numpy()                          # log pi_roll - log pi_train
        lp = np.minimum(b.logp_train[ok], 0.0)
        p = np.exp(lp)
        a = np.abs(Delta)
        eps = implied_eps(p, a)
        kk2, kk3 = k2(log_rho).numpy(), k3(log_rho).numpy()
        self.sum_k1 += float(Delta.sum())
        self.sum_k3 += float(kk3.sum())
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
        n = self.n_seq
        self.seq["n_tok"][:n] += np.bincount(idx, minlength=n)
        return Tokens(b, rows, idx, b.log_rho[ok], Delta, a, p, eps, kk2, kk3, bin_, tail)

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

    # --- responses ---------------------------------------------------------------------------

    def _seq_index(self, b: Batch) -> np.ndarray:
        """Dense index of each row's response, keyed by (file, step, sample_id)."""
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

