"""Property tests of ``tailtheory.pruning.sweep``: DVP's claim P4, pruned mass against the
mismatch left after pruning."""

import numpy as np
import pytest
import torch

from tailtheory.mismatch.logprob import logprob_mismatch, sampled_mismatch_bias
from tailtheory.pruning.sweep import pruning_knee, pruning_sweep, remaining_mismatch
from tailtheory.core.safeset import safe_vocab_mask


# --- P4: the sweep ---------------------------------------------------------------------------

def _pair(seed=0, V=200):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(3, 5, V, generator=g, dtype=torch.float64) * 4
    return z, z + 0.01 * z.abs() * torch.randn(z.shape, generator=g, dtype=torch.float64)


def test_p4_unpruned_row_is_the_m1_m4_mismatch():
    z, z_prime = _pair()
    ref = pruning_sweep(z, z_prime, rhos=(1e-3,)).iloc[0]
    Delta = logprob_mismatch(z, z_prime)
    assert ref.rho == 0 and ref.mass_mean == 0 and ref.kept_frac == 1
    assert ref.abs_delta_max == pytest.approx(float(Delta.abs().max()), rel=1e-12)
    assert ref.bias_mean == pytest.approx(float(sampled_mismatch_bias(z, z_prime).mean()), rel=1e-9)
    p_prime = torch.softmax(z_prime, -1)
    assert ref.abs_delta_mean == pytest.approx(float((p_prime * Delta.abs()).sum(-1).mean()), rel=1e-9)


def test_p4_inconsistent_unpruned_row_is_an_error_not_a_refutation(monkeypatch):
    """P4: a rho = 0 row that disagrees with tailtheory.mismatch.logprob raises (registry: ERROR)."""
    from tailtheory.core import registry as claims
    from tailtheory.pruning import claims as claims_pruning

    z, z_prime = _pair()
    df = pruning_sweep(z, z_prime, rhos=(1e-3,))
    df.loc[0, "abs_delta_max"] += 1e-6
    monkeypatch.setattr(claims_pruning, "p4_measurement", lambda profile: (df, z, z_prime))
    result = claims.run_claim(claims.all_claims()["P4"], "quick")
    assert result.evidence is None and result.error.startswith("RuntimeError")
    assert "rho = 0" in result.error


def test_p4_sweep_moves_right():
    """Mass grows and the kept set shrinks with rho; no mismatch leaves nothing to remove."""
    z, z_prime = _pair(1)
    df = pruning_sweep(z, z_prime)
    assert list(df.rho) == [0.0] + [10.0 ** -k for k in range(8, 0, -1)]
    assert (np.diff(df.mass_mean) >= 0).all() and (np.diff(df.kept_frac) <= 0).all()
    assert (df.seq_kl >= -1e-15).all()
    same = remaining_mismatch(z, z, safe_vocab_mask(z, "min_p", 1e-2))
    assert same["seq_kl"] == 0 and same["abs_delta_max"] == 0 and same["mass_mean"] > 0


# --- bad input -------------------------------------------------------------------------------

def test_remaining_mismatch_bad_shapes_and_masks():
    z = torch.zeros(2, 4, dtype=torch.float64)
    keep = torch.ones(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\(B, T, V\)"):
        remaining_mismatch(z, z, keep)
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 9, generator=g, dtype=torch.float64)
    keep = safe_vocab_mask(z, "min_p", 0.2)
    with pytest.raises(ValueError, match="resp_mask must be a bool"):
        remaining_mismatch(z[None], z[None], keep[None], torch.full((1, 3), 0.5))
    with pytest.raises(ValueError, match=r"perturbed_logits \(1, 3, 8\) and mask"):
        remaining_mismatch(z[None], z[None, :, :8], keep[None])


# --- the knee ------------------------------------------------------------------------------

def test_pruning_knee_is_the_largest_rho_under_the_mass():
    z, z_prime = _pair(2)
    sweep = pruning_sweep(z, z_prime)
    knee = pruning_knee(sweep, 1e-3)
    cheap = sweep[(sweep.rho > 0) & (sweep.mass_mean <= 1e-3)]
    assert knee["rho"] == cheap.rho.max()
    assert knee["seq_kl_left"] == pytest.approx(float(cheap.seq_kl.min() / sweep.seq_kl.iloc[0]))
    with pytest.raises(ValueError, match="rho = 0"):
        pruning_knee(sweep.iloc[1:])
