"""The pair behind notebook 02's explorer (tailtheory.trm.experiments.uniform_kl_pair)."""

import math

import pytest

from tailtheory.trm import experiments as tx
from tailtheory.trm.exact import divergences

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("T,delta", [(3, 1e-3), (6, 0.7)])
def test_uniform_kl_pair_has_the_same_kl_in_every_context(T, delta):
    roll, theta = tx.uniform_kl_pair(T, delta)
    div = divergences(roll, theta)
    assert div["delta"] == pytest.approx(delta, rel=1e-12)
    assert div["seq_kl"] == pytest.approx(T * delta, rel=1e-12)
    assert float(roll.probs().min()) == float(roll.probs().max()) == 0.5


def test_kl_gap_inverts_log_cosh():
    for kl in (0.0, 1e-4, 0.5, 3.0):
        assert math.log(math.cosh(tx.kl_gap(kl) / 2)) == pytest.approx(kl, abs=1e-14)
    with pytest.raises(ValueError):
        tx.kl_gap(-0.1)


def test_uniform_kl_table_rows_hold_every_bound():
    df = tx.uniform_kl_table(range(2, 7), 0.05)
    assert list(df["T"]) == [2, 3, 4, 5, 6] and (df["delta_target"] == 0.05).all()
    for key in ("classical", "pm_kl", "mix_kl", "adaptive", "unified"):
        assert (df[f"bound/{key}"] >= df["abs_error"] - df["num_tol"]).all(), key
    assert df["abs_error"].is_monotonic_increasing          # T13: the error grows with T
