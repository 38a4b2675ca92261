"""Importance ratios (``tailtheory.diagnose.sections.ratios``): the ratio sums it folds against the
engine's caps, the tail curve and figure."""

import numpy as np
import pandas as pd

from tailtheory.diagnose.aggregate import RHO_GRID, ratio_caps
from tailtheory.diagnose.sections.ratios import SECTION

from .conftest import drawn


def test_ratio_sums_and_tail_curve(run):
    acc, d, recs = run
    df = pd.DataFrame(recs)
    rho = np.exp(df.logp_train - df.logp_rollout).to_numpy()
    sums = acc.folds["ratios"]
    assert sums.caps == ratio_caps() == d.summary["ratio_caps"]
    assert np.isclose(d.summary["rho_mean"], rho.mean())
    assert sums.ratios["tis_truncated"] == (rho > sums.caps["tis_cap"]).sum()
    t = drawn(SECTION, d)
    np.testing.assert_allclose(t.frac_rho_above_c, [(rho > c).mean() for c in RHO_GRID])
    assert d.verdicts["ratios"][0].startswith("rho = pi_train / pi_roll over 720 tokens")
