"""M6 (``tailtheory.diagnose.sections.accumulation``): the per-response tail counts and log-ratios
it folds, its regression and figure."""

import numpy as np
import pandas as pd

from tailtheory.diagnose.sections.accumulation import SECTION

from .conftest import drawn


def test_accumulation_folds_each_response(run):
    acc, d, recs = run
    df = pd.DataFrame(recs)
    per = df.assign(tail=np.exp(df.logp_train) < acc.tail_p,
                    lr=df.logp_train - df.logp_rollout).groupby("sample_id")
    n = acc.n_seq
    np.testing.assert_array_equal(acc.seq["n_tail"][:n], per["tail"].sum().to_numpy())
    np.testing.assert_allclose(acc.seq["log_ratio"][:n], per.lr.sum().to_numpy(), rtol=1e-12)
    assert d.summary["m6"] is None                     # every response has 12 tokens
    assert d.verdicts["accumulation"][0].endswith("every response has the same length.")
    data = drawn(SECTION, d)
    assert set(data.kind) == {"response", "group"} and (data.kind == "response").sum() == 60
