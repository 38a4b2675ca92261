"""TRM's acceptance (``tailtheory.diagnose.sections.trm``): the per-token violations and
per-response k2 / k3 it folds, the acceptance table and figure."""

import numpy as np
import pandas as pd

from tailtheory.diagnose.sections.trm import SECTION, accept

from .conftest import DELTA_MAX, drawn


def test_trm_folds_and_accepts(run):
    acc, d, recs = run
    df = pd.DataFrame(recs)
    lr = df.logp_train - df.logp_rollout
    k2 = 0.5 * lr ** 2
    assert acc.folds["trm"].violations == int((k2 > DELTA_MAX).sum())
    np.testing.assert_allclose(acc.seq["max_k2"][:acc.n_seq],
                               k2.groupby(df.sample_id).max().to_numpy(), rtol=1e-12)
    keep = accept(acc.seq["max_k2"][:acc.n_seq], "max", DELTA_MAX)
    assert d.summary["trm_accept_rate"] == keep.mean()
    data = drawn(SECTION, d)
    assert set(data.kind) == {"threshold", "length"} and d.verdicts["trm"][0].startswith("TRM")
