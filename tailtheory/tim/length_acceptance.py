"""TRM's acceptance by response length, from a run's token dump (the numbers T14 reads).

Source: TRM (Li et al., arXiv 2512.23075). TRM keeps a sequence iff its largest token
divergence stays under ``delta_max``; with sampled-token log-ratios the max filter uses
``k2 = (log rho)^2 / 2`` (T12). With an i.i.d. per-token violation rate ``q`` a sequence of ``T``
tokens is kept with probability ``(1 - q)^T``. The studies whose runs dump their tokens
(:mod:`tailtheory.tim.training`, :mod:`tailtheory.tim.dose`) keep :func:`t14_token_numbers` of
each dump; :mod:`tailtheory.trm.training` judges T14 on them.
"""

from __future__ import annotations

T14_DELTAS = (5e-2, 5e-3, 5e-4)
"""Thresholds on ``k2``: the engine's ``trm_delta_max`` (0.05) and two lower ones, so that the
length law is seen where violations are not rare."""

LEN_EDGES = (0, 50, 100, 150, 200, 100_000)
"""Response-length bins ``[lo, hi)`` in tokens."""


def t14_token_numbers(df) -> dict:
    """Per ``delta``: tokens, violating tokens, and per length bin the sequences, kept sequences,
    the sum over them of ``(1 - q)^T`` (``q`` of this run), the bin's tokens and violations, and
    the sum of ``(1 - q_bin)^T`` with the bin's own rate (a diagnostic beside the verdict: it
    separates "long responses violate more often" from "violations cluster"). ``df``: a token
    dump."""
    import numpy as np

    k2 = 0.5 * df["log_rho"].to_numpy() ** 2
    group = df.groupby(["step", "seq"]).ngroup().to_numpy()            # sequence of each token
    T = np.bincount(group)
    kmax = np.full(len(T), -np.inf)
    np.maximum.at(kmax, group, k2)
    bins = np.digitize(T, LEN_EDGES[1:-1])                            # bin of each sequence
    nbins = range(len(LEN_EDGES) - 1)
    out = {}
    for delta in T14_DELTAS:
        q = float((k2 > delta).mean())
        kept, pred = kmax <= delta, (1 - q) ** T
        # the bin's own rate: violations over tokens of the bin's sequences
        v_seq = np.bincount(group, weights=k2 > delta, minlength=len(T))
        q_bin = [float(v_seq[bins == b].sum() / T[bins == b].sum()) if (bins == b).any() else 0.0
                 for b in nbins]
        out[f"{delta:g}"] = {
            "tokens": int(len(k2)), "violations": int((k2 > delta).sum()),
            "n": [int((bins == b).sum()) for b in nbins],
            "kept": [int(kept[bins == b].sum()) for b in nbins],
            "pred": [float(pred[bins == b].sum()) for b in nbins],
            "bin_tokens": [int(T[bins == b].sum()) for b in nbins],
            "bin_violations": [int(v_seq[bins == b].sum()) for b in nbins],
            "pred_bin_q": [float(((1 - q_bin[b]) ** T[bins == b]).sum()) for b in nbins]}
    return out
