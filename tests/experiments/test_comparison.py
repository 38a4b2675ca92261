"""The one verdict rule and the measurement (``tailtheory/experiments/comparison.py``): comparisons
by hand, the mean and its standard error, arms selected by tag."""

from __future__ import annotations

import math

import pytest

from tailtheory.core.registry import Verdict
from tailtheory.experiments import comparison as st
from tailtheory.engine.config import TrainConfig
from tailtheory.experiments.study import Arm


def rows(*xs, key="final_reward"):
    return [{key: x} for x in xs]


def _arm(label, tags=None, n=2):
    return Arm(label, tuple(TrainConfig(seed=s) for s in range(n)), tags or {})


def test_compare_by_hand():
    data = {"A": rows(1.0, 1.2), "B": rows(0.0, 0.2)}
    c = st.compare(data, "A", "B", "final_reward")
    # delta = 1.1 - 0.1; se = sqrt(0.02 / 2 + 0.02 / 2)
    assert c.delta == pytest.approx(1.0) and c.se == pytest.approx(math.sqrt(0.02))
    assert c.verdict == Verdict.TOY_SCALE and c.z == pytest.approx(1.0 / math.sqrt(0.02))
    assert st.compare(data, "B", "A", "final_reward").verdict == Verdict.REFUTED
    close = {"A": rows(0.3, 0.5), "B": rows(0.2, 0.4)}   # delta 0.1, se 0.141: inside 2 se
    assert st.compare(close, "A", "B", "final_reward").verdict == Verdict.NOT_REPRODUCED
    with pytest.raises(ValueError, match=">= 2 seeds"):
        st.compare({"A": rows(1.0), "B": rows(0.0, 0.1)}, "A", "B", "final_reward")
    # equal seeds: se 0, z infinite with the sign of delta
    assert st.compare({"A": rows(1.0, 1.0), "B": rows(0.0, 0.0)}, "A", "B",
                      "final_reward").z == math.inf


def test_mean_se_and_worst():
    m, se = st.mean_se([1.0, 2.0, 3.0])
    assert m == 2.0 and se == pytest.approx(1 / math.sqrt(3))
    m, se = st.mean_se([4.0])
    assert m == 4.0 and math.isnan(se)
    with pytest.raises(ValueError, match="no values"):
        st.mean_se([])
    assert st.worst(Verdict.TOY_SCALE, Verdict.REFUTED) == Verdict.REFUTED
    assert st.worst(Verdict.TOY_SCALE, Verdict.NOT_REPRODUCED) == Verdict.NOT_REPRODUCED
    assert st.worst(Verdict.TOY_SCALE, Verdict.TOY_SCALE) == Verdict.TOY_SCALE


def test_measurement_selects_by_tag():
    arms = [_arm("exact", {"path": "exact", "role": "main"}),
            _arm("fp8", {"path": "fp8", "role": "main"}),
            _arm("TRM | fp8", {"path": "fp8", "role": "remedy", "method": "trm"})]
    data = {a.label: [{"seed": s, "final_reward": 0.1 * s, "reward": [0.0, 0.5]}
                      for s in range(2)] for a in arms}
    m = st.Measurement(data, arms, "demo")
    assert m.labels(role="main") == ["exact", "fp8"] and m.labels(path="fp8") == ["fp8", "TRM | fp8"]
    assert m.label(method="trm") == "TRM | fp8"
    with pytest.raises(ValueError, match="2 arms match"):
        m.label(path="fp8")
    with pytest.raises(KeyError, match="demo has no arm 'bf16'"):
        m["bf16"]
    assert m.mean("fp8", "final_reward") == pytest.approx(0.05)
    assert list(m.table().columns) == ["label", "seed", "final_reward"]
    curves = m.curves(series=("reward",))
    assert len(curves) == 3 * 2 * 2 and set(curves["metric"]) == {"reward"}


def test_measurement_reads_as_the_mapping_it_wraps():
    m = st.Measurement({"A": rows(1.0, 2.0)})
    assert list(m.values()) == [rows(1.0, 2.0)] and dict(m.items()) == {"A": rows(1.0, 2.0)}
    assert m.per_seed("A", "final_reward") == [1.0, 2.0] and m.missing == {}


def test_welch_values_by_hand_and_against_scipys_welch_test():
    from scipy import stats

    w = st.welch_values([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    # equal variances 1, n 3 a side: se sqrt(2/3), df 4, t(0.975, 4) = 2.776445
    assert w.delta == pytest.approx(1.0) and w.se == pytest.approx(math.sqrt(2 / 3))
    assert w.df == pytest.approx(4.0)
    assert (w.low, w.high) == pytest.approx((1 - 2.776445 * math.sqrt(2 / 3),
                                             1 + 2.776445 * math.sqrt(2 / 3)), abs=1e-5)
    xa, xb = [0.61, 0.58, 0.66], [0.60, 0.52, 0.71, 0.55]       # unequal spread and size
    w = st.welch_values(xa, xb, level=0.9)
    ci = stats.ttest_ind(xa, xb, equal_var=False).confidence_interval(0.9)
    assert (w.low, w.high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert w.level == 0.9 and w.low < w.delta < w.high


@pytest.mark.parametrize("xa, xb, match", [
    ([1.0], [0.0, 1.0], ">= 2 finite values"), ([1.0, float("nan")], [0.0, 1.0], "finite"),
    ([1.0, 1.0], [0.0, 0.0], "neither side varies")])
def test_welch_values_refuses_what_has_no_interval(xa, xb, match):
    with pytest.raises(ValueError, match=match):
        st.welch_values(xa, xb)
    with pytest.raises(ValueError, match="level"):
        st.welch_values([1.0, 2.0], [0.0, 1.0], level=1.0)
