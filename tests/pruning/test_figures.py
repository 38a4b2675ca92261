"""Figures of vocabulary pruning (``tailtheory.pruning.figures``; claim P4): each returns its
figure and the table drawn."""

import matplotlib
import pytest
import torch

from tailtheory.pruning.figures import (plot_mass_shares, plot_pruning_tradeoff,
                                        plot_trained_sweep)
from tailtheory.pruning.sweep import pruning_sweep
from tailtheory.pruning.trained_tails import TRAINED_SETTINGS
from tests.pruning.test_trained_tails import fake_trained_data

matplotlib.use("Agg")


def _pair(seed=2, V=200):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(3, 5, V, generator=g, dtype=torch.float64) * 4
    return z, z + 0.01 * z.abs() * torch.randn(z.shape, generator=g, dtype=torch.float64)


def test_plot_pruning_tradeoff_returns_figure_and_data():
    sweep = pruning_sweep(*_pair())
    fig, df = plot_pruning_tradeoff(sweep)
    assert len(fig.axes) == 2 and (df.seq_kl_left.iloc[0] == 1.0)
    assert set(df.columns) >= {"rho", "mass_mean", "seq_kl_left", "abs_delta_max_left"}
    with pytest.raises(ValueError, match="rho = 0"):
        plot_pruning_tradeoff(sweep.iloc[1:])


def test_trained_plots_return_figure_and_table():
    data = fake_trained_data()
    random = [{"rho": 0.0, "mass_mean": 0.0, "seq_kl": 1.0}, {"rho": 1e-4, "mass_mean": 1e-4,
                                                               "seq_kl": 0.9}]
    fig, df = plot_trained_sweep(data, random_sweep=random)
    assert len(fig.axes) == 4 and set(df.setting) == {"random", *TRAINED_SETTINGS}
    assert {"seq_kl_left", "mass_mean", "tok_abs_mean_left", "tok_outlier_0.01"} <= set(df)
    fig, df = plot_mass_shares(data)
    assert len(fig.axes) == 3 and {"mass_share", "abs_share", "sampled_abs_share"} <= set(df)
