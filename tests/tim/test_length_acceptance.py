"""TRM's acceptance by length from a token dump (``tailtheory/tim/length_acceptance.py``, the
numbers T14 reads), against a loop over the definition."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tailtheory.tim.length_acceptance import LEN_EDGES, T14_DELTAS, t14_token_numbers


def _dump(lengths, log_rho_of, seed=0):
    """A token dump of one step: sequence ``i`` has ``lengths[i]`` tokens."""
    rng = np.random.default_rng(seed)
    rows = [{"step": 0, "seq": i, "t": t, "log_rho": log_rho_of(rng)}
            for i, n in enumerate(lengths) for t in range(n)]
    return pd.DataFrame(rows)


def test_t14_token_numbers_against_a_loop():
    """T14: per threshold, q over tokens; per length bin, kept sequences and sum of (1-q)^T."""
    df = _dump([10, 60, 60, 120, 250], lambda g: g.normal(0, 0.1))
    out = t14_token_numbers(df)
    for delta in T14_DELTAS:
        k2 = 0.5 * df["log_rho"] ** 2
        q = float((k2 > delta).mean())
        d = out[f"{delta:g}"]
        assert d["tokens"] == len(df) and d["violations"] == int((k2 > delta).sum())
        for b, (lo, hi) in enumerate(zip(LEN_EDGES, LEN_EDGES[1:])):
            seqs = [g for _, g in df.groupby("seq") if lo <= len(g) < hi]
            assert d["n"][b] == len(seqs)
            assert d["kept"][b] == sum((0.5 * g["log_rho"] ** 2).max() <= delta for g in seqs)
            assert d["pred"][b] == pytest.approx(sum((1 - q) ** len(g) for g in seqs))
            toks = sum(len(g) for g in seqs)
            viol = sum(int((0.5 * g["log_rho"] ** 2 > delta).sum()) for g in seqs)
            assert (d["bin_tokens"][b], d["bin_violations"][b]) == (toks, viol)
            q_b = viol / toks if toks else 0.0
            assert d["pred_bin_q"][b] == pytest.approx(sum((1 - q_b) ** len(g) for g in seqs))
