"""The tail bias (``tailtheory.diagnose.sections.tail_bias``): the signed mean of Delta per group
from the shared sums, its table and figure."""

import numpy as np

from tailtheory.diagnose.sections.tail_bias import SECTION

from .conftest import drawn


def test_tail_bias_means_and_figure(run):
    acc, d, recs = run
    delta = np.array([r["logp_rollout"] - r["logp_train"] for r in recs])
    assert np.isclose(d.summary["mean_delta"], delta.mean())
    tail = np.exp([r["logp_train"] for r in recs]) < acc.tail_p
    assert np.isclose(d.summary["tail_bias"], delta[tail].mean())
    assert SECTION.fold is None and d.verdicts["tail_bias"][0].startswith("all tokens")
    assert list(drawn(SECTION, d).columns) == ["p_lo", "p_hi", "p_mean", "tokens", "mean_delta",
                                               "se_delta"]
