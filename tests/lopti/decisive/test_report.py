"""L1-L6 context: the bins split into decisive and free tokens
(``tailtheory/lopti/decisive/report.py``): the weighted shares and means on a measurement written
by hand, and the figures' tables."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from tailtheory.lopti.decisive import report as dr

matplotlib.use("Agg")


def _token(b, D, effect, adv, role="fork", weight=1.0, p=0.1):
    return {"seed": 1, "batch": 0, "row": 0, "t": 0, "p": p, "bin": b, "adv": adv, "role": role,
            "weight": weight, "D": D, "D_se": 0.01, "gap": effect / (1 - p), "gap_se": 0.01,
            "effect": effect, "q_with": 0.5, "q_without": 0.5}


def _data(norms=False):
    tokens = [_token(0, 0.30, 0.30, 1.0), _token(0, 0.20, -0.20, -1.0),
              _token(0, 0.01, 0.01, 0.5, role="synonym"), _token(0, 0.0, 0.0, 0.0, role="junk"),
              _token(3, 0.00, 0.00, 0.2, role="scaffold", weight=10.0, p=0.9),
              _token(3, 0.05, -0.05, -0.2, role="fork", weight=10.0, p=0.9)]
    counts = {r: [0] * 4 for r in ("synonym", "order", "fork", "scaffold", "off_path", "junk")}
    counts["fork"][0], counts["synonym"][0], counts["junk"][0] = 2, 1, 1
    counts["scaffold"][3], counts["fork"][3] = 10, 10
    batch = {"seed": 1, "batch": 0, "responses": 4, "count": [4, 0, 0, 20],
             "count_role": counts}
    if norms:
        batch["norms"] = {"bin": [1.0, 0.0, 0.0, 0.5], "decisive": [0.9, 0, 0, 0.1],
                          "free": [0.2, 0, 0, 0.45]}
    return {"K": 8, "tokens": tokens, "batches": [batch]}


def test_bin_summary_weights_and_shares():
    s = dr.bin_summary(_data(), tau=0.1).set_index("bin")
    low, top = s.loc["[0,.25]"], s.loc["(.75,1]"]
    assert low["token_frac"] == pytest.approx(4 / 24) and top["token_frac"] == pytest.approx(20 / 24)
    assert low["decisive_share"] == pytest.approx(0.5)            # 2 of 4
    assert low["helps"] == pytest.approx(0.5) and low["hurts"] == pytest.approx(0.5)
    assert low["format_breaking"] == pytest.approx(0.25)
    assert low["adv_decisive"] == pytest.approx(0.0) and low["adv_free"] == pytest.approx(0.25)
    assert top["decisive_share"] == pytest.approx(0.0)             # 0.05 < tau
    # "all": the weights count: 20 tokens above the bin stand for 2 probed ones
    assert s.loc["all", "decisive_share"] == pytest.approx(2 / 24)
    assert np.isnan(s.loc["(.25,.5]", "decisive_share"])            # no token there
    assert "norm_bin" not in s


def test_role_summary_and_norms():
    r = dr.role_summary(_data(), tau=0.1)
    fork_low = r[(r["role"] == "fork") & (r["bin"] == "[0,.25]")].iloc[0]
    assert fork_low["tokens"] == 2 and fork_low["decisive_share"] == pytest.approx(1.0)
    s = dr.bin_summary(_data(norms=True), tau=0.1).set_index("bin")
    assert s.loc["[0,.25]", "norm_decisive"] == pytest.approx(0.9)


def test_plots_return_their_tables():
    d = _data(norms=True)
    fig, table = dr.plot_split({"warm": dr.bin_summary(d, 0.1), "mid": dr.bin_summary(d, 0.1)})
    assert set(table["policy"]) == {"warm", "mid"} and len(fig.axes) == 4
    fig, table = dr.plot_d_vs_p(d, 0.1)
    assert len(table) == len(d["tokens"])
