"""The TRM explorer of notebook 02 (tailtheory.trm.figures.plot_trm_explorer, explore_trm)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tailtheory.trm import experiments as tx  # noqa: E402
from tailtheory.trm.figures import BOUND_STYLE, explore_trm, plot_trm_explorer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("T,delta", [(8, 0.01), (3, 0.5)])
def test_trm_explorer_draws_the_exact_error_under_every_bound(T, delta):
    fig, df = plot_trm_explorer(T, delta)
    left, right = fig.axes
    assert list(df["T"]) == list(range(2, T + 1))
    assert df["delta"].to_numpy() == pytest.approx(delta, rel=1e-12)
    exact = next(ln for ln in left.lines if ln.get_label() == "exact |Error|")
    assert np.array_equal(exact.get_ydata(), df["abs_error"].to_numpy())
    for key, (label, _, _) in BOUND_STYLE.items():
        line = next(ln for ln in left.lines if ln.get_label() == label)
        assert np.array_equal(line.get_ydata(), df[f"bound/{key}"].to_numpy())
        assert (line.get_ydata() >= exact.get_ydata() - df["num_tol"].to_numpy()).all()
    last = df.iloc[-1]
    bars = {t.get_text(): p.get_width() for t, p in zip(right.get_yticklabels(), right.patches)}
    assert bars["exact |Error|"] == last["abs_error"]
    assert bars["T8 unified"] == last["bound/unified"]
    assert bars["T8 halved (T10)"] == pytest.approx(last["bound/unified"] / 2)
    assert f"T = {T}" in right.get_title()
    ref = tx.uniform_kl_table([T], delta).iloc[0]                # the same pair, computed alone
    assert last["abs_error"] == ref["abs_error"]
    plt.close(fig)


def test_trm_explorer_rejects_horizons_it_cannot_enumerate_cheaply():
    for T in (1, 13):
        with pytest.raises(ValueError, match="T must lie"):
            plot_trm_explorer(T, 0.01)


def test_explore_trm_outside_a_kernel_draws_once_and_shows_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_FIGURES", str(tmp_path))
    before = plt.get_fignums()
    assert explore_trm() is None
    assert plt.get_fignums() == before and list(tmp_path.iterdir()) == []
