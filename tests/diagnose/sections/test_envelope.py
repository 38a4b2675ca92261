"""|Delta| against p (``tailtheory.diagnose.sections.envelope``): its sums, table, figure and the
heat map written beside it."""

import io

import numpy as np
import pandas as pd

from tailtheory.diagnose.aggregate import implied_eps
from tailtheory.diagnose.sections.envelope import SECTION

from .conftest import drawn


def test_envelope_sums_table_and_heat_map(run):
    acc, d, recs = run
    sums = acc.folds["envelope"]
    assert sums.hist.sum() == len(recs) == d.tables["envelope"].tokens.sum()
    p = np.exp([r["logp_train"] for r in recs])
    a = np.abs([r["logp_rollout"] - r["logp_train"] for r in recs])
    assert np.isclose(sums.eps_max, implied_eps(p, a).max())
    assert d.summary["eps_implied_max"] == sums.eps_max
    assert len(d.verdicts["envelope"]) >= 3
    assert drawn(SECTION, d) is d.tables["envelope"]
    heat = pd.read_csv(io.StringIO(SECTION.files(d)["envelope_hist.csv"]))
    assert heat.tokens.sum() == len(recs) and (heat.p_lo < heat.p_hi).all()
