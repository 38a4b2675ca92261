"""The M3 explorer of notebook 01 (tailtheory.mismatch.figures.plot_m3_explorer, explore_m3)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tailtheory.mismatch import logprob as mm  # noqa: E402
from tailtheory.mismatch.figures import explore_m3, plot_m3_explorer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _line(ax, label):
    return next(ln for ln in ax.lines if ln.get_label() == label)


@pytest.mark.parametrize("eps,p", [(0.05, 0.5), (1.0, 0.99)])
def test_m3_explorer_draws_tokens_under_the_bound_and_the_witness_on_it(eps, p):
    fig, df = plot_m3_explorer(eps, p, n=32, V=16)
    left, right = fig.axes
    assert len(df) == 32 * 16
    assert (df["eps_measured"] <= eps + 1e-12).all()          # |delta| <= eps per entry
    assert np.allclose(df["bound_exact"], mm.mismatch_bound(df["p"].to_numpy().copy(), eps).numpy())
    assert (df["abs_Delta"] <= df["bound_exact"] * (1 + 1e-9) + 1e-15).all()
    bound = float(mm.mismatch_bound(p, eps))
    for ax, x in ((left, 1 - p), (right, eps)):
        star = _line(ax, "witness: attains it")
        assert star.get_xdata()[0] == pytest.approx(x) and star.get_ydata()[0] == pytest.approx(
            bound, rel=1e-12)
    exact = _line(right, "exact bound (M3)")                  # the bound against eps, at p
    i = np.argmin(abs(exact.get_xdata() - eps))
    assert exact.get_ydata()[i] == pytest.approx(float(mm.mismatch_bound(p, exact.get_xdata()[i])))
    first, linear = _line(right, "first order (M3)"), _line(right, "2 eps (1-p) (M2, to O(eps^2))")
    assert (first.get_ydata() >= exact.get_ydata()).all()
    assert (linear.get_ydata() <= exact.get_ydata() * (1 + 1e-12)).all()
    assert f"{eps:.3g}" in left.get_title() and f"{p:.3g}" in right.get_title()
    plt.close(fig)


def test_explore_m3_outside_a_kernel_draws_once_and_shows_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_FIGURES", str(tmp_path))
    before = plt.get_fignums()
    assert explore_m3(n=8, V=8) is None
    assert plt.get_fignums() == before and list(tmp_path.iterdir()) == []
