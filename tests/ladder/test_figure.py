"""Notebook 08's figure (``tailtheory/ladder/figure.py``): the frame holds every stored seed
and the V7 / V8 rung numbers, the trend line appears only with four rungs of three seeds, and
an empty store still draws (every panel, no line)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tailtheory.engine.start.rungs import RUNGS  # noqa: E402
from tailtheory.ladder.build import store_rung  # noqa: E402
from tailtheory.ladder import effects as size, figure as size_figure  # noqa: E402


@pytest.fixture(autouse=True)
def empty_results(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))


def _data(n_rungs: int, seeds: int = 3) -> dict:
    return {r.name: {"tail": {str(s): {"v2_low": -2.0 + 0.3 * i + 0.01 * s, "m7_slope": 1.0}
                              for s in range(1, seeds + 1)}}
            for i, r in enumerate(RUNGS[:n_rungs])}


def _labels(fig) -> set:
    return {line.get_label() for ax in fig.axes for line in ax.get_lines()}


def test_the_frame_and_a_trend_with_four_rungs():
    store_rung("batch_shape_ladder", "base", [{"decoder": "hf", "dtype": "bf16", "batch": 32,
                                               "over_1e3": 0.01, "non_embedding_params": 1}],
               {}, "test")
    df = size_figure.size_frame(_data(4))
    v2 = df[df.effect == "V2 low-p"]
    assert len(v2) == 12 and set(v2.rung) == {r.name for r in RUNGS[:4]}
    assert df[df.effect == "V8 hf bf16"].value.tolist() == [0.01]
    fig, _ = size_figure.plot_size(_data(4))
    assert any(lab.startswith("trend: GROWS") for lab in _labels(fig)) and "extrapolated" in \
        _labels(fig)
    assert "V2 low-p: GROWS (4 rungs)" in {ax.get_title() for ax in fig.axes}
    plt.close(fig)


def test_the_extrapolation_stops_at_an_effects_bound():
    """A rank correlation rising 0.2 a decade from 0.6 at 1M leaves [-1, 1] at 100M: the dashed
    line stops there, while an unbounded effect runs on to 1B."""
    xs, ys = size_figure.extrapolation(0.6 - 0.2 * 6, 0.2, 1e6, size_figure.BOUNDS["L1 Spearman"])
    assert ys.max() <= 1.0 and xs.max() <= 1.0e8 * 1.001 and xs.min() == pytest.approx(1e6)
    xs, ys = size_figure.extrapolation(0.6 - 0.2 * 6, 0.2, 1e6)
    assert xs.max() == pytest.approx(size_figure.EXTRAPOLATE_TO) and ys.max() > 1.0


def test_no_trend_line_below_four_rungs_or_three_seeds_and_an_empty_store_draws():
    for data in (_data(3), _data(4, seeds=2), {}):
        fig, df = size_figure.plot_size(data)
        assert not any(lab.startswith("trend") for lab in _labels(fig))
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert len(visible) == len(size.EFFECTS) + 3
        plt.close(fig)


def test_the_decide_figure_draws_both_sizes_and_an_empty_store():
    seeds = {str(s): {"l1_rho": 0.9 + 0.01 * s, "l4_d": 0.8} for s in (1, 2, 3)}
    fig, df = size_figure.plot_decide({"base": {"lopti_decide": seeds},
                                       "w256": {"lopti_decide": seeds}})
    assert len(df[df.effect == "L1 Spearman"]) == 6 and set(df.rung) == {"base", "w256"}
    assert "L1 Spearman\nbase vs w256: FLAT" in {ax.get_title() for ax in fig.axes}
    plt.close(fig)
    fig, df = size_figure.plot_decide({})
    assert df.empty and len([ax for ax in fig.axes if ax.get_visible()]) == 7
    plt.close(fig)
