"""k1 and k3 over steps (``tailtheory.diagnose.sections.steps``): the per-step sums it folds, the
table and figure."""

import numpy as np
import pandas as pd

from tailtheory.diagnose.sections.steps import SECTION

from .conftest import drawn


def test_steps_sums(run):
    acc, d, recs = run
    df = pd.DataFrame(recs)
    per = df.assign(k1=df.logp_rollout - df.logp_train).groupby("step")
    t = d.tables["steps"]
    assert sorted(acc.folds["steps"].steps) == [0, 1, 2] == list(t.step)
    np.testing.assert_array_equal(t.tokens, per.size().to_numpy())
    np.testing.assert_allclose(t.k1, per.k1.mean().to_numpy(), rtol=1e-12)
    assert d.summary["steps"] == 3 and "over the first third of 3 steps" in d.verdicts["steps"][0]
    assert drawn(SECTION, d) is t
