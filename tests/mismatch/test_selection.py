"""Property tests of tailtheory.mismatch.selection: the selection bias of engine-sampled tokens,
claims M4 (per probability bin) and M5 (DVP)."""

import math

import numpy as np
import pytest
import torch

from tailtheory.mismatch import selection as sel
from tailtheory.mismatch.figures import plot_selection_bias


# --- M5 -----------------------------------------------------------------------------------------

P_M5 = torch.softmax(torch.tensor([4.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0, -5.0],
                                  dtype=torch.float64), -1)


def _rel_err(sigma: float, n: int = 200_000) -> float:
    f = sel.sampled_bias_second_order(P_M5, sigma)
    mc = sel.sampled_bias_monte_carlo(P_M5, sigma, n, seed=0)
    return float((mc - f).abs().max() / f.abs().max())


def test_m5_second_order_matches_monte_carlo_at_small_sigma():
    """M5 (HOLDS-UNDER small sigma): the formula is within 5% of Monte Carlo at sigma = 0.05."""
    assert _rel_err(0.05) < 0.05


def test_m5_formula_breaks_at_large_sigma():
    """M5's assumption matters: at sigma = 1 the second-order formula is off by > 10%."""
    assert _rel_err(1.0) > 0.10


def test_m5_sign_tail_positive_head_negative():
    """M5: positive for tail tokens; for the head token about -sigma^2 (1 - p_k), near 0."""
    f = sel.sampled_bias_second_order(P_M5, 0.1) / 0.01
    assert (f[P_M5 < 0.05] > 0).all()
    assert -1.5 * (1 - P_M5[0]) < f[0] < 0


def test_m5_monte_carlo_matches_exact_at_two_tokens():
    """M5's Monte Carlo estimator vs quadrature, V = 2 (delta_1 - delta_0 ~ N(0, 2 sigma^2))."""
    p, sigma = torch.tensor([0.8, 0.2], dtype=torch.float64), 0.5
    x = torch.linspace(-8, 8, 20001, dtype=torch.float64) * math.sqrt(2) * sigma  # delta_1-delta_0
    w = torch.exp(-x ** 2 / (4 * sigma ** 2))
    Delta1 = x - torch.log(p[0] + p[1] * torch.exp(x))  # M1 with delta_0 = 0
    pp1 = p[1] * torch.exp(Delta1)
    exact = float((w * pp1 * Delta1).sum() / (w * pp1).sum())
    mc = float(sel.sampled_bias_monte_carlo(p, sigma, 400_000, seed=1)[1])
    assert abs(mc - exact) < 0.02 * abs(exact)


# --- bad input ----------------------------------------------------------------------------------

def test_bad_sigma_and_probabilities_rejected():
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        sel.sampled_bias_second_order(torch.tensor([0.5, 0.5]), -0.1)
    with pytest.raises(ValueError, match="one probability vector"):
        sel.sampled_bias_monte_carlo(torch.full((2, 2), 0.5), 0.1)
    with pytest.raises(ValueError, match=r"p \(2, 4\) and sigma \(3,\) must broadcast"):
        sel.sampled_bias_second_order(torch.full((2, 4), 0.25), torch.full((3,), 0.1))


# --- figure -------------------------------------------------------------------------------------

def test_plot_selection_bias():
    """M4/M5 figure: (fig, df); the sampled-token bias is positive overall (M4)."""
    import matplotlib.pyplot as plt

    fig, df = plot_selection_bias(n_contexts=3000, n_bins=6)
    assert {"p_mid", "mean_Delta", "sem", "m5", "count"} <= set(df.columns)
    assert np.average(df.mean_Delta, weights=df["count"]) > 0
    plt.close(fig)
