"""The report's sections of ``tailtheory diagnose`` (``tailtheory.diagnose.sections``): their
keys documented, and the grouping of a statistic into bins."""

import numpy as np

from tailtheory.diagnose.sections import SUMMARY_KEYS, group_bins


def test_summary_keys_documented():
    """Every key of summary.json is defined in docs/diagnose.md, in the same words."""
    from tailtheory.core.io import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "diagnose.md").read_text()
    for key, text in SUMMARY_KEYS.items():
        assert f"| `{key}` | {text} |" in doc, key


def test_group_bins_one_per_value_or_quantiles():
    assert group_bins(np.array([5, 3, 5, 7]), 4).tolist() == [1, 0, 1, 2]      # few values
    x = np.arange(100)
    b = group_bins(x, 4)
    assert b.min() == 0 and b.max() == 3 and np.all(np.diff(b) >= 0)
    assert np.bincount(b).tolist() == [25, 25, 25, 25]
    ties = group_bins(np.array([0] * 50 + list(range(1, 51))), 4)               # ties together
    assert len(set(ties[:50])) == 1
