"""LOPTI's Figures 1 and 3 (tailtheory.lopti.figures) on a hand-made measurement."""

from tailtheory.lopti import figures
from tailtheory.lopti.onestep import METHODS
from tests.lopti.test_measurement import fake_data


def test_plots_return_figure_and_table():
    import matplotlib.pyplot as plt

    fig, table = figures.plot_figure1(fake_data())
    assert len(fig.axes) == 6 and {"seed", "quantity", "bin", "value"} <= set(table.columns)
    fig3, t3 = figures.plot_figure3(fake_data())
    assert set(t3["quantity"]) == {f"rise_{m}" for m in METHODS}
    plt.close(fig)
    plt.close(fig3)
