"""Figures of the dose-response (``tailtheory/tim/dose_figures.py``): drawn from hand-made
numbers, the tables they return hold the numbers they plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from tailtheory.tim import dose, dose_figures  # noqa: E402


def _row(seed, acc, k3, fmt=0.9):
    return {"seed": seed, "final_eval": acc, "final_reward": acc, "k3": [k3, k3],
            "format": [fmt, fmt]}


def _data():
    data = {"GRPO | exact": [_row(s, 0.63 + 0.002 * s, 0.0) for s in range(1, 6)]}
    for sigma, acc, k3 in ((0.3, 0.63, 1e-3), (1.0, 0.62, 2e-2), (2.0, 0.30, 0.2)):
        data[f"GRPO | logit sigma={sigma:g}"] = [_row(s, acc + 0.01 * s, k3) for s in (1, 2, 3)]
    data["GRPO | fp8 bypass"] = [_row(s, 0.63, 3e-4) for s in (1, 2, 3)]
    data[f"TIS | logit sigma={dose.REMEDY_SIGMA:g}"] = [_row(s, 0.5, 0.1) for s in (1, 2, 3)]
    return data


def test_plot_dose_draws_every_arm():
    import matplotlib.pyplot as plt

    fig, df = dose_figures.plot_dose(_data())
    assert len(df) == 6
    assert df.set_index("label").loc["GRPO | logit sigma=2", "k3"] == pytest.approx(0.2)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    pts = dose_figures.run_points(_data())
    assert len(pts) == 5 + 3 * 5 and set(pts["role"]) == {"baseline", "dose", "real", "remedy"}
    plt.close(fig)
