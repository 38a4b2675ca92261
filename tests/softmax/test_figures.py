"""The softmax figures (``tailtheory.softmax.figures``, claims S4 and S5): each comes with the
table it is drawn from."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tailtheory.softmax import scores as sm  # noqa: E402
from tailtheory.softmax import wedge as sw  # noqa: E402
from tailtheory.softmax.figures import plot_layer_wedge, plot_score_norm  # noqa: E402
from tests.softmax.test_wedge import tiny  # noqa: E402, F401 (the tiny LM fixture)


def test_score_norm_plot_returns_figure_and_data():
    """The S4 figure comes with its data; the S4 witnesses sit on the bound lines."""
    fig, df = plot_score_norm(n=40, vocab_size=32)
    up = df[df.kind == "upper_witness"]
    assert np.allclose(up.score_norm, up.upper, rtol=1e-9)
    assert {"p", "score_norm", "lower", "upper", "weak"} <= set(df.columns)
    plt.close(fig)
    assert len(sm.score_norm_table(n=40, vocab_size=32)) == 40


def test_layer_wedge_plot_returns_figure_and_data(tiny):
    """The S5 figure comes with its per-token table, every token under its upper end."""
    model, _, rows = tiny
    names = [n for n, _ in sw.layer_modules(model)]
    fig, df = plot_layer_wedge(rows, names, vocab_size=16)
    assert len(df) == len(rows["p"]) and set(df.layer) == set(names)
    assert (df.grad_norm <= df.upper * (1 + sw.WEDGE_RTOL)).all()
    plt.close(fig)
