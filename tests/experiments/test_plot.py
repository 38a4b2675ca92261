"""Bands over seeds (tailtheory.experiments.plot.seed_bands): seaborn on a long table draws the mean
(or median) per level and the band from the lowest seed to the highest."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from plotting import lines_and_bands  # noqa: E402
from tailtheory.experiments.plot import band_table, long_table, seed_bands  # noqa: E402


def _long():
    rows = [{"label": lb, "seed": s, "step": t, "value": t * k + s ** 2}
            for k, lb in enumerate(("b", "a"), start=1) for s in range(3) for t in range(4)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("estimator", ["mean", "median"])
def test_seed_bands_draw_the_estimate_and_the_min_max_band(estimator):
    df = _long()
    fig, ax = plt.subplots()
    seed_bands(df, "step", "value", "label", ax, estimator=estimator, legend=True)
    drawn = lines_and_bands(ax)
    assert len(drawn) == 2
    for (x, y, band), label, colour in zip(drawn, ("b", "a"), ("C0", "C1")):
        g = df[df["label"] == label].groupby("step")["value"]
        assert list(x) == list(g.mean().index)
        assert y == pytest.approx(g.agg(estimator).to_numpy())
        assert band == {float(t): (g.min()[t], g.max()[t]) for t in g.min().index}
    assert to_rgb(ax.lines[0].get_color()) == to_rgb("C0")        # order of appearance
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["b", "a"]
    plt.close(fig)


def test_seed_bands_follow_the_given_order_and_leave_the_legend_out():
    fig, ax = plt.subplots()
    seed_bands(_long(), "step", "value", "label", ax, order=["a", "b"])
    (_, y_first, _), _ = lines_and_bands(ax)
    assert y_first[1] == pytest.approx(2 + 5 / 3)                  # "a" at step 1: 2 + mean s^2
    assert ax.get_legend() is None
    plt.close(fig)


def test_band_table_summarises_the_long_table():
    wide = pd.DataFrame({"label": ["x"] * 4, "step": [0, 0, 1, 1], "seed": [0, 1, 0, 1],
                         "reward/mean": [0.1, 0.3, 0.2, None], "time/step": [1.0] * 4})
    long = long_table(wide)
    assert set(long["metric"]) == {"reward/mean"} and len(long) == 3
    table = band_table(wide)
    assert list(table["mean"]) == pytest.approx([0.2, 0.2])
    assert list(table["lo"]) == [0.1, 0.2] and list(table["hi"]) == [0.3, 0.2]
    assert list(table["seeds"]) == [2, 1]
