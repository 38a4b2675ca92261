"""V3's sign-free row (``tailtheory/tim/rho_sign.py``): the split of log rho by the sign of A
against a direct computation, and the rule both ways."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tailtheory.tim import rho_sign as rs


def test_numbers_against_a_direct_computation():
    rng = np.random.default_rng(0)
    log_rho = rng.normal(0, 0.01, 500)
    adv = rng.choice([-1.0, 0.0, 1.0], 500)
    n = rs.rho_sign_numbers(pd.DataFrame({"log_rho": log_rho, "adv": adv}))
    assert n["n_pos"] == (adv > 0).sum() and n["n_neg"] == (adv < 0).sum()
    assert n["d"] == pytest.approx(log_rho[adv > 0].mean() - log_rho[adv < 0].mean())
    from scipy.stats import ks_2samp

    assert n["ks"] == pytest.approx(ks_2samp(log_rho[adv > 0], log_rho[adv < 0]).statistic)


def test_empty_part_is_nan():
    n = rs.rho_sign_numbers(pd.DataFrame({"log_rho": [0.1, 0.2], "adv": [1.0, 1.0]}))
    assert n["n_neg"] == 0 and math.isnan(n["d"]) and math.isnan(n["ks"])


@pytest.mark.parametrize("ds, differ", [((0.01, 0.011, 0.012), True), ((0.01, -0.01, 0.0), False)])
def test_rule(ds, differ):
    data = {"fp8 bypass": [{"rho_sign": {"d": d, "ks": 0.1}} for d in ds]}
    t = rs.rho_sign_table(data, ["fp8 bypass"])
    assert t["fp8 bypass"]["differ"] is differ and t["fp8 bypass"]["seeds"] == 3
