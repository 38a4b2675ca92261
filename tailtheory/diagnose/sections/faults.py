"""Faults of a dump that make a token-tail report wrong, found while it is read: the report's
first section (an error refuses the dumps, a warning is named).

Source: the quantity of TIM (arXiv 2605.14220), ``log_rho = log pi_train - log pi_roll`` of the
sampled token, and what it presumes: both columns are log-probabilities of the *same* token,
scored at the *same* temperature. The faults new users' dumps show, and what each one does:

- **log-probs above 0** (either column, beyond :data:`LOGP_TOL`): an error. A value above
  ``1 + LOGP_TOL`` is refused as soon as it is read.
- **probabilities in place of log-probs**: an error. A column of one file is read as
  probabilities when every finite value lies in ``[-LOGP_TOL, 1 + LOGP_TOL]`` and more than
  :data:`PROB_SHARE` of them lie above ``LOGP_TOL``. Log-probs never lie above ``LOGP_TOL``,
  so ordinary log-probs near 0 (``p`` close to 1) are never taken for probabilities; a column
  with only some values above ``LOGP_TOL`` is refused as log-probs above 0.
- **an off-by-one shift** between the columns within a response: an error above
  :data:`SHIFT_ERROR`, a named warning above :data:`SHIFT_WARN` (see :meth:`FaultScan.shift`).
- **log-probs at two temperatures**: a named warning (see :meth:`FaultScan.temperature`): the
  report still measures the ratio these log-probs give, but that ratio is the temperature gap.
- **top-k lists that stop before DVP's cut-off**: a note on DVP's rows
  (:func:`truncation_note`), the pruned mass there being the mass outside the list.

Errors are ``ValueError`` naming the file and column and what to do, raised before anything is
written; warnings are :class:`Fault` records, shown first in the report, in ``summary.json``
(``faults``) and on the console. The section folds :class:`FaultScan` over the run
(:class:`FaultSums`) and names what it found (:func:`faults_section`).

Shapes: a batch of ``n`` token rows, ``(n,)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.formats import get_reader
from tailtheory.diagnose.sections.base import Diagnosis, Section

NAME = "faults"

LOGP_TOL = 1e-4
"""Largest log-prob accepted above 0: float rounding of a log-prob near 0 (a bf16 / fp16
``log_softmax`` rounds toward 0, never this far above it)."""
PROB_SHARE = 0.5
"""More than this share of a column's values in ``(LOGP_TOL, 1]`` (and none outside
``[-LOGP_TOL, 1 + LOGP_TOL]``): the column holds probabilities. Sampled tokens' probabilities
mostly exceed ``1e-4``; log-probs never do."""
SHIFT_ERROR = 3.0
"""The shifted pairing's mean ``|logp_train - logp_rollout|`` at most ``1/3`` of the aligned
one's: an off-by-one shift, an error. Clean runs give a ratio below 1 at any mismatch (the
shifted pairing adds the token-to-token change of log-probs to the mismatch): 0.01 at bf16
size, 0.7 at a logit noise of sd 2; a genuine shift gives 9 at a logit noise of sd 0.3."""
SHIFT_WARN = 1.5
"""A ratio between this and :data:`SHIFT_ERROR`: a warning (a shift in part of the responses)."""
MIN_SHIFT_PAIRS = 100
"""Fewest adjacent token pairs (positions t, t + 1 of one response, in one batch) for the check."""
TEMP_SLOPE_TOL = 0.05
"""``|c - 1|`` at least this, ``c`` the slope of ``logp_rollout`` on ``logp_train``: the two
columns scale differently, as two temperatures make them."""
TEMP_SYSTEMATIC = 0.75
"""...and at least this share of the mean squared ``Delta`` is systematic (carried by the mean
``Delta`` of each trainer-probability bin, less the bins' sampling noise). A temperature makes
``Delta`` a near-deterministic function of ``p`` (0.82-0.99 in logit simulations at T = 0.6-1.5);
logit noise does not (0.05 at bf16 size, 0.35 at sd 1, 0.68 at an absurd sd 2)."""
MIN_TEMP_TOKENS = 400
"""Fewest tokens for the temperature check."""
TRUNCATED_EXACT = 0.5
"""A DVP row whose pruned mass is exact (the list reaches the cut-off) at fewer than this share
of positions measures the mass outside the lists, not a bias."""

COLUMNS = ("logp_train", "logp_rollout")
"""The two log-prob columns checked, in the generic names."""


@dataclass
class Fault:
    """A fault found: ``name`` (``shift``, ``temperature``), ``level`` (``error`` /
    ``warning``), ``message`` (one line) and the numbers behind it (``stats``)."""

    name: str
    level: str
    message: str
    stats: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Plain dict for ``summary.json``."""
        return asdict(self)


class FaultScan:
    """Streaming sums of the fault checks over batches of one run.

    ``files``: the dump paths (named in errors); ``kinds``: each file's format, to name its
    columns as the file does (its reader's ``shown``; default: the generic names).
    """

    def __init__(self, files: list[Path], kinds: list[str] | None = None):
        self.files, self.kinds = files, kinds
        self.domain: dict[tuple[int, str], dict] = {}
        self.pairs = np.zeros((len(files), 5))     # n, |a_next|, |lag|, |a_prev|, |lead|
        self.reg = np.zeros(6)                      # n, sum x, y, xx, xy, yy (x train, y roll)

    def _col(self, file: int, c: str) -> str:
        return get_reader(self.kinds[file]).shown.get(c, c) if self.kinds else c

    def add(self, b, idx: np.ndarray) -> None:
        """Fold one :class:`~tailtheory.diagnose.read.Batch` in (``idx``: each row's response
        index). Raises ``ValueError`` at once on a log-prob above ``1 + LOGP_TOL``."""
        ok = b.ok
        if not ok.any():
            return
        train = b.logp_train[ok]
        roll = train - b.log_rho[ok]
        for c, v in zip(COLUMNS, (train, roll)):
            self._domain(b, c, v, ok)
        self._pairs(b.file, idx[ok], b.position[ok], train, roll)
        self.reg += [len(train), train.sum(), roll.sum(), (train * train).sum(),
                     (train * roll).sum(), (roll * roll).sum()]

    def _domain(self, b, c: str, v: np.ndarray, ok: np.ndarray) -> None:
        pos = v > LOGP_TOL
        d = self.domain.setdefault((b.file, c), dict(n=0, pos=0, unit=0, max=-math.inf,
                                                     where=None))
        d["n"] += len(v)
        d["pos"] += int(pos.sum())
        d["unit"] += int(((v >= -LOGP_TOL) & (v <= 1 + LOGP_TOL)).sum())
        if pos.any():
            j = int(np.argmax(v))
            d["max"] = max(d["max"], float(v[j]))
            if d["where"] is None:
                i = int(np.flatnonzero(pos)[0])
                sid = b.sample_id[ok][i]
                d["where"] = (sid.item() if hasattr(sid, "item") else sid,
                              int(b.position[ok][i]))
            if v[j] > 1 + LOGP_TOL:
                raise ValueError(self._above(b.file, c, d, "at least "))

    def _above(self, file: int, c: str, d: dict, some: str = "") -> str:
        sid, pos = d["where"]
        return (f"{self.files[file]}: column {self._col(file, c)} has {some}{d['pos']} value(s) "
                f"above 0 (largest {d['max']:.4g}; first at sample_id {sid!r}, position {pos}): "
                f"log-probs are <= 0, write the log-probability of the sampled token "
                f"(log_softmax of the logits, not the logits), then rerun")

    def check_domain(self) -> None:
        """After the last batch: refuse probabilities in place of log-probs, and log-probs
        above 0 (the rules of :data:`PROB_SHARE` and :data:`LOGP_TOL`). Raises ``ValueError``."""
        order = sorted(self.domain, key=lambda fc: (fc[0], fc[1] != "logp_rollout"))
        for file, c in order:                # an engine dump's own column before the sum
            d = self.domain[(file, c)]
            if d["pos"] == 0:
                continue
            if d["unit"] == d["n"] and d["pos"] > PROB_SHARE * d["n"]:
                raise ValueError(
                    f"{self.files[file]}: column {self._col(file, c)} holds probabilities, not "
                    f"log-probs (every value in [0, 1], {100 * d['pos'] / d['n']:.3g}% of "
                    f"{d['n']} above 0): write log(p) of the sampled token, then rerun")
            raise ValueError(self._above(file, c, d))

    # --- off-by-one shift --------------------------------------------------------------------

    def _pairs(self, file, idx, position, train, roll) -> None:
        order = np.lexsort((position, idx))
        i, t = idx[order], position[order]
        nxt = np.flatnonzero((i[1:] == i[:-1]) & (t[1:] == t[:-1] + 1))
        if not len(nxt):
            return
        a, n = order[nxt], order[nxt + 1]                # token t and token t + 1
        self.pairs[file] += [len(a), np.abs(train[n] - roll[n]).sum(),
                             np.abs(train[n] - roll[a]).sum(), np.abs(train[a] - roll[a]).sum(),
                             np.abs(train[a] - roll[n]).sum()]

    @staticmethod
    def _shift_stats(s: np.ndarray) -> dict:
        n, a_next, lag, a_prev, lead = s
        ratio = lambda a, b: (a / b if b > 0 else math.inf) if a > 0 else 0.0  # noqa: E731
        return dict(pairs=int(n), aligned=a_prev / max(n, 1), lead=lead / max(n, 1),
                    lag=lag / max(n, 1), lead_ratio=ratio(a_prev, lead),
                    lag_ratio=ratio(a_next, lag))

    def shift(self) -> Fault | None:
        """The off-by-one check. Over adjacent positions ``t, t + 1`` of each response, the
        mean ``|logp_train[t] - logp_rollout[t]|`` (aligned) against
        ``|logp_train[t] - logp_rollout[t + 1]|`` (*lead*: the trainer's slot ``t`` holds token
        ``t + 1``) and, with ``t + 1``'s aligned difference, ``|logp_train[t + 1] -
        logp_rollout[t]|`` (*lag*). The ratio aligned / shifted: ``>= SHIFT_ERROR`` is an error
        (every number of the report would compare different tokens), ``>= SHIFT_WARN`` a
        warning; checked per file, then over all files, with at least
        :data:`MIN_SHIFT_PAIRS` pairs. Pairs split across batches are not counted."""
        cands = [(self.files[f], self.pairs[f]) for f in range(len(self.files))]
        if len(self.files) > 1:
            cands.append((f"{len(self.files)} dumps ({self.files[0]} ... {self.files[-1]})",
                          self.pairs.sum(0)))
        worst = None
        for where, s in cands:
            st = self._shift_stats(s)
            if st["pairs"] < MIN_SHIFT_PAIRS:
                continue
            r = max(st["lead_ratio"], st["lag_ratio"])
            if r >= SHIFT_ERROR:
                return Fault("shift", "error", self._shift_msg(where, st, True), st)
            if r >= SHIFT_WARN and (worst is None or r > worst[0]):
                worst = (r, where, st)
        if worst:
            return Fault("shift", "warning", self._shift_msg(worst[1], worst[2], False),
                         worst[2])
        return None

    @staticmethod
    def _shift_msg(where, st: dict, error: bool) -> str:
        lead = st["lead_ratio"] >= st["lag_ratio"]
        r = st["lead_ratio"] if lead else st["lag_ratio"]
        which = ("logp_train[t] matches logp_rollout[t+1]" if lead else
                 "logp_train[t+1] matches logp_rollout[t]")
        fix = ("the trainer's log-probs start one token late: score response token t with the "
               "logits at t - 1 (logits[:, P-1:-1] for a prompt of P tokens)" if lead else
               "the trainer's log-probs start one token early: drop the last prompt token's "
               "log-prob")
        shifted = st["lead"] if lead else st["lag"]
        head = (f"{where}: logp_train is shifted by one position against logp_rollout within "
                f"responses" if error else
                f"{where}: part of logp_train may be shifted by one position against "
                f"logp_rollout")
        return (f"{head}: {which} (mean |difference| {shifted:.3g}) {r:.2g}x better than "
                f"the aligned pair ({st['aligned']:.3g}) over {st['pairs']} adjacent tokens; "
                f"{fix}" + (", then rerun" if error else ""))

    # --- temperature -------------------------------------------------------------------------

    def temperature(self, bins: dict) -> Fault | None:
        """The two-temperature check, from the sums of the slope ``c`` of ``logp_rollout`` on
        ``logp_train`` (least squares with an intercept) and ``bins``, the per-probability-bin
        sums of ``Delta`` (:attr:`tailtheory.diagnose.aggregate.Accumulator.bins`). A warning
        when ``|c - 1| >= TEMP_SLOPE_TOL`` and the systematic share of ``Delta`` is at least
        :data:`TEMP_SYSTEMATIC` over :data:`MIN_TEMP_TOKENS` tokens or more. At temperature
        ``T``, ``log p_T = log p / T + b`` with an offset ``b`` per position, so ``c`` is about
        ``1 / T`` when the sampler's side is at ``T``, or ``T`` when the trainer's is; ``b``
        biases ``c`` toward 1, so the temperature named is a lower bound on the gap."""
        n, sx, sy, sxx, sxy, syy = self.reg
        if n < MIN_TEMP_TOKENS:
            return None
        vx = sxx - sx * sx / n
        if vx <= 0:
            return None
        c = (sxy - sx * sy / n) / vx
        share = systematic_share(bins)
        st = dict(tokens=int(n), slope=c, systematic_share=share)
        if abs(c - 1) < TEMP_SLOPE_TOL or not share >= TEMP_SYSTEMATIC:
            return None
        st.update(t_rollout=1 / c, t_train=c)
        msg = (f"logp_rollout scales as {c:.3g} x logp_train over {int(n)} tokens and "
               f"{100 * share:.2g}% of the mismatch is this systematic scaling: the two sides "
               f"look scored at different temperatures, the sampler's at about T = {1 / c:.2g} "
               f"with the trainer's at 1, or the trainer's at about T = {c:.2g} with the "
               f"sampler's at 1 (the gap may be larger). Score both at the sampling temperature "
               f"(divide the trainer's logits by T, or ask the engine for processed log-probs): "
               f"until then the mismatch below is mostly the temperature gap")
        return Fault("temperature", "warning", msg, st)

    def faults(self, bins: dict) -> list[Fault]:
        """Every fault after the last batch: raises ``ValueError`` on an error (the domain of
        the log-probs first, then a shift); returns the warnings."""
        self.check_domain()
        out = [f for f in (self.shift(), self.temperature(bins)) if f is not None]
        for f in out:
            if f.level == "error":
                raise ValueError(f.message)
        return out


def systematic_share(bins: dict) -> float:
    """The share of the mean squared ``Delta`` carried by each probability bin's mean ``Delta``,
    less the bins' sampling noise: ``sum_b max(n_b mean_b^2 - var_b, 0) / sum Delta^2``, from the
    per-bin sums ``n``, ``sum_d``, ``sum_d2``. NaN when every ``Delta`` is 0."""
    n, s, s2 = (np.asarray(bins[k], np.float64) for k in ("n", "sum_d", "sum_d2"))
    tot = s2.sum()
    if tot <= 0:
        return math.nan
    nz = n > 1
    mean_sq = s[nz] ** 2 / n[nz]
    var = np.maximum(s2[nz] - mean_sq, 0) / (n[nz] - 1)
    return float(np.maximum(mean_sq - var, 0).sum() / tot)


def truncation_note(exact_frac: float, k_max: int, k_min: int) -> str:
    """The note on one DVP row about lists that stop before its cut-off: empty when the pruned
    mass is exact everywhere; below :data:`TRUNCATED_EXACT` the row measures the mass outside
    the top-k lists, not a bias; otherwise it is an upper bound at the remaining positions."""
    if exact_frac >= 1:
        return ""
    k = f"top-{k_max}" if k_min == k_max else f"top-{k_min} to top-{k_max}"
    if exact_frac < TRUNCATED_EXACT:
        return (f"the {k} lists stop before this cut-off at "
                f"{_pct(1 - exact_frac)} of positions, so this mass is the probability outside "
                f"the lists, not a bias of DVP (full lists, k = V, measure it)")
    return (f"an upper bound at the {_pct(1 - exact_frac)} of positions where the {k} list "
            f"stops early")


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


# --- the section -----------------------------------------------------------------------------

class FaultSums:
    """The fault checks' sums (:class:`FaultScan`) over the run."""

    def __init__(self, acc):
        self.scan = FaultScan(acc.files, acc.kinds)

    def add(self, t) -> None:
        """Fold one batch in (its every row; ``ValueError`` at once on a log-prob above 1)."""
        self.scan.add(t.batch, t.rows)


def faults_section(acc: Accumulator, d: Diagnosis) -> None:
    """Run the fault checks (:meth:`FaultScan.faults`): an error raises ``ValueError``; warnings
    go first in the report and into ``summary.json``'s ``faults``."""
    found = acc.folds[NAME].scan.faults(acc.bins)
    d.summary["faults"] = [f.as_dict() for f in found]
    d.points["faults"] = found
    d.verdicts["faults"] = ([f"{f.name}: {f.message}." for f in found] or
                            ["none found (log-probs <= 0, not probabilities, no off-by-one shift, "
                             "one temperature on both sides)."])


SUMMARY = {
    "faults": "the fault checks' warnings: name, level, message, stats (an error refuses the "
              "dumps instead)",
}
"""The section's keys of ``summary.json`` and what each holds."""

SECTION = Section(NAME, "Faults of the dumps", "the log-probs' domain, alignment and temperature",
                  lambda ctx, d: faults_section(ctx.acc, d), FaultSums, summary=SUMMARY)
