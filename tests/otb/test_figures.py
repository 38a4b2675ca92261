"""OTB's figures: the baseline-variance bands (seaborn) and notebook 03's explorer
(tailtheory.otb.figures.plot_otb_explorer, explore_otb)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from plotting import drawn_lines, lines_and_bands  # noqa: E402
from tailtheory.otb import figures as of  # noqa: E402
from tailtheory.otb.variance import variance_sweep  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_baseline_variance_draws_the_median_and_min_max_per_baseline():
    rows = variance_sweep(Ts=(2, 3), sharpness=(0.5, 2.0), seeds=(0, 1))
    fig, long = of.plot_baseline_variance(rows)
    assert list(long.columns) == ["V", "T", "eos", "sharpness", "seed", "baseline", "V_over_Vopt"]
    assert set(long["baseline"]) == set(of.BASELINE_LABELS)
    for ax, eos in zip(fig.axes, (-1, 0)):
        drawn = lines_and_bands(ax)
        assert len(drawn) == len(of.BASELINE_LABELS)
        for (x, y, band), name in zip(drawn, of.BASELINE_LABELS):
            g = long[(long["eos"] == eos) & (long["baseline"] == name)].groupby("sharpness")
            assert list(x) == [0.5, 2.0]
            assert y == pytest.approx(g["V_over_Vopt"].median().to_numpy())
            assert band[2.0] == pytest.approx((g["V_over_Vopt"].min()[2.0],
                                               g["V_over_Vopt"].max()[2.0]))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == list(of.BASELINE_LABELS.values())
    plt.close(fig)


@pytest.mark.parametrize("N,sharpness", [(4, 2.0), (32, 1.0)])
def test_otb_explorer_draws_exact_variances_over_n_and_sampled_groups_at_n(N, sharpness):
    fig, df = of.plot_otb_explorer(N, sharpness, n_groups=50)
    (ax,) = fig.axes
    exact = df[df["source"] == "exact"]
    per_sample = (exact["rel_mse"] * exact["N"]).groupby(exact["baseline"])
    assert (per_sample.max() - per_sample.min()).max() < 1e-12       # V(B) / N: one V per B
    v = per_sample.mean()
    assert v["opt"] <= v["otb"] * (1 + 1e-12) and v["opt"] <= v["mean"] * (1 + 1e-12)  # O3
    groups = df[df["source"] == "groups"]
    assert list(groups["baseline"]) == list(of.EXPLORER_METHODS) and (groups["N"] == N).all()
    lines = {ln.get_label(): ln for ln in drawn_lines(ax)}
    for k, (label, _, _) in of.EXPLORER_POPULATION.items():
        line = lines[f"exact V(B)/N, B = {label}"]
        assert np.allclose(line.get_ydata(), exact[exact["baseline"] == k]["rel_mse"])
    for m, (label, _) in of.EXPLORER_METHODS.items():
        dot = lines[f"50 groups: {label}"]
        assert dot.get_xdata()[0] == N
        assert dot.get_ydata()[0] == groups[groups["baseline"] == m]["rel_mse"].iloc[0]
    assert f"{v['otb'] / v['mean']:.3f}" in ax.get_title() and f"N = {N}" in ax.get_title()
    plt.close(fig)


def test_explore_otb_outside_a_kernel_draws_once_and_shows_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_FIGURES", str(tmp_path))
    before = plt.get_fignums()
    assert of.explore_otb() is None
    assert plt.get_fignums() == before and list(tmp_path.iterdir()) == []
