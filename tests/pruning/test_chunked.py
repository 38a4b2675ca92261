"""Tests of tailtheory.pruning.chunked: P4's sweep and the mass shares folded in one chunk of
positions at a time, against pruning_sweep and mass_shares on whole tensors (STYLE rule 6).

Tolerance (rule 20): the sweep's mismatch columns to 1e-9 relative (``sweep_rows`` prunes the
log-softmax by subtracting ``log(1 - m)``; the reference takes a log-softmax over ``S``: the two
round their log-sums differently, ~1e-15 absolute against ``|Delta|`` of ~1e-3 here); masses,
the shares to 1e-12; the kept fraction to 1e-7 (the reference divides integer tensors, which
torch does in float32).
"""

import pytest
import torch

from tailtheory.core.safeset import keep_from_logp
from tailtheory.mismatch import real as rm
from tailtheory.mismatch.chunked import paired_logit_chunks
from tailtheory.pruning import chunked as pc
from tailtheory.pruning.sweep import _remaining_rows, pruning_sweep
from tailtheory.pruning.trained_tails import mass_shares
from tailtheory.core.safeset import safe_vocab_mask

V, B, T = 512, 3, 10


@pytest.fixture(scope="module")
def pair():
    model = rm.m7_model(V, hidden=64, layers=2)
    ids = rm.random_input_ids(V, B, T, seed=2)
    return model, ids, rm.paired_logits(model, ids, "bf16")


def _chunks(z, zi, n=7):
    zf, zif = z.reshape(-1, V), zi.reshape(-1, V)
    return ((slice(r, r + n), zf[r:r + n].float(), zif[r:r + n].float())
            for r in range(0, zf.shape[0], n))


@pytest.mark.parametrize("rule, rhos", [("min_p", (1e-8, 1e-4, 1e-2, 0.1, 0.5)),
                                        ("top_p", (1e-6, 0.05, 0.5))])
def test_sweep_from_chunks_equals_pruning_sweep_and_mass_shares(pair, rule, rhos):
    """P4: every column of pruning_sweep's table and every share of mass_shares."""
    _, _, (z, zi) = pair
    ref = pruning_sweep(z, zi, rhos, rule)
    ref_shares = mass_shares(z, zi)
    sweep, shares = pc.sweep_from_chunks(_chunks(z, zi), B, rhos, rule)
    assert list(sweep.columns) == list(ref.columns) == ["rho", *pc.SWEEP_KEYS]
    assert (ref.mass_mean.iloc[1:] > 0).any(), "the sweep must prune something"
    for c in ref.columns:
        rtol = (1e-12 if c in ("rho", "mass_mean", "mass_max", "seq_mass") else
                1e-7 if c == "kept_frac" else 1e-9)
        torch.testing.assert_close(torch.tensor(sweep[c].values), torch.tensor(ref[c].values),
                                   rtol=rtol, atol=1e-300, msg=c)
    torch.testing.assert_close(torch.tensor(shares.values), torch.tensor(ref_shares.values),
                               rtol=1e-12, atol=1e-300)


def test_sweep_rows_equals_remaining_rows(pair):
    """The per-row fast path against the reference rows, including rows that prune nothing and
    rows that keep one token (Delta~ = 0 there; the fast path leaves ~1e-16 of rounding)."""
    _, _, (z, zi) = pair
    z, zi = z.reshape(-1, V), zi.reshape(-1, V)
    lp, lq = torch.log_softmax(z, -1), torch.log_softmax(zi, -1)
    for rho in (0.0, 1e-6, 1e-2, 0.9):
        keep = safe_vocab_mask(zi, "min_p", rho)
        # the same rule on the same float64 log-softmax of the same rows: bitwise
        assert torch.equal(keep, keep_from_logp(torch.log_softmax(zi.double(), -1), "min_p", rho))
        torch.testing.assert_close(pc.sweep_rows(lp, lq, keep), _remaining_rows(z, zi, keep),
                                   rtol=1e-9, atol=1e-14)


def test_pruning_probe_on_real_chunks(pair):
    """The probe is sweep_from_chunks over paired_logit_chunks: rho = 0 is the unpruned bf16
    mismatch, and the pruned mass grows with rho."""
    model, ids, _ = pair
    sweep, shares = pc.pruning_probe(model, ids)
    again, _ = pc.sweep_from_chunks(paired_logit_chunks(model, ids, "bf16"), B)
    assert sweep.equals(again)
    assert sweep.rho.iloc[0] == 0 and sweep.mass_mean.iloc[0] == 0 and sweep.seq_kl.iloc[0] > 0
    assert (sweep.mass_mean.diff().iloc[1:] >= 0).all()
    assert shares.mass_share.sum() == pytest.approx(1.0)


def test_bad_input(pair):
    _, _, (z, zi) = pair
    with pytest.raises(ValueError, match="no chunk"):
        pc.sweep_from_chunks(iter(()), B)
    with pytest.raises(ValueError, match="min_p"):
        pc.sweep_from_chunks(_chunks(z, zi), B, rhos=(2.0,))
