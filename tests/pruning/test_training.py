"""P5's per-step figure (tailtheory.pruning.training.plot_p5): seeds as seaborn bands."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from plotting import lines_and_bands  # noqa: E402
from tailtheory.pruning import training as pt  # noqa: E402

KEYS = ("bias_bound", "mismatch_abs_mean", "reward")


def _data():
    def run(seed, shift):
        return {"seed": seed, **{k: [shift * (i + 1) + seed * 0.01 * t for t in range(4)]
                                 for i, k in enumerate(KEYS)}, "pruned_mass": [0.0] * 4}

    return {"GRPO": [run(s, 0.0) for s in range(3)],
            "DVP rho=1e-08": [run(s, 0.1) for s in range(3)]}


def test_plot_p5_draws_mean_and_min_max_of_each_key_per_label():
    data = _data()
    fig, df = pt.plot_p5(data)
    assert list(df.columns) == ["label", "seed", "step", *("reward", "pruned_mass", "bias_bound",
                                                           "mismatch_abs_mean")]
    assert len(df) == 2 * 3 * 4
    for ax, key in zip(fig.axes, KEYS):
        for (x, y, band), label in zip(lines_and_bands(ax), data):
            g = df[df["label"] == label].groupby("step")[key]
            assert y == pytest.approx(g.mean().to_numpy())
            assert band[3.0] == pytest.approx((g.min()[3], g.max()[3]))
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == list(data)
    assert fig.axes[0].get_legend() is None and fig.axes[0].get_yscale() == "symlog"
    plt.close(fig)
