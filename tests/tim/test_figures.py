"""V3's figure (``tailtheory/tim/figures.py``): the contribution histograms drawn from their
table, on the hand-made numbers of ``test_training.py``."""

from tailtheory.tim import figures as mf
from tests.tim.test_training import _data


def test_figures_draw_from_their_tables():
    import matplotlib

    matplotlib.use("Agg")
    data = _data(mismatch_final=0.1)
    fig, df = mf.plot_contribution(data)
    assert len(df) > 0 and fig.axes
    assert set(mf.contribution_table(data)["sign"]) == {"A > 0", "A < 0"}
