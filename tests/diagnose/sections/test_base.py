"""What the sections of ``tailtheory diagnose`` share (``tailtheory.diagnose.sections.base``):
the summary keys documented, the grouping of a statistic into bins, the wording, the list."""

import numpy as np

from tailtheory.diagnose.sections.base import SUMMARY_KEYS, group_bins


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


def test_ratio_and_count_wording():
    """Ratios below 1 say "smaller"/"less" with "x as large as", never "0.64x larger"; ratios
    that round to 1 say "about as"; counts agree with their noun."""
    from tailtheory.diagnose.sections.base import plural, times

    assert times(3.24) == "3.2x larger than"
    assert times(0.64) == "smaller, 0.64x as large as"
    assert times(1.004) == "about as large as" and times(0.996) == "about as large as"
    assert times(0.5, "more", "less", "much") == "less, 0.5x as much as"
    assert "n/a" in times(float("nan"))
    assert plural(1, "token") == "1 token" and plural(2, "token") == "2 tokens"
    assert plural(0, "response") == "0 responses"


def test_verdicts_never_say_larger_below_one(tmp_path):
    """A dump whose head tokens mismatch more than its tail: "less", not "0.xx more"; one token
    is "1 token"."""
    from tailtheory.diagnose.cli import diagnose_dumps

    from .conftest import write_jsonl

    recs = []
    for s in range(40):
        for t, (lp, dd) in enumerate([(-0.05, 0.02), (-4.0, 0.001)]):
            recs.append(dict(sample_id=s, position=t, token_id=0, logp_train=lp,
                             logp_rollout=lp + dd * (-1) ** s))
    d = diagnose_dumps([write_jsonl(tmp_path / "h.jsonl", recs)])
    text = " ".join(d.verdicts["envelope"])
    assert "tail tokens mismatch less, 0.05x as much as head tokens" in text
    assert "0.05x more" not in text
    one = diagnose_dumps([write_jsonl(tmp_path / "one.jsonl", recs[:1])])
    assert "over 1 token." in one.verdicts["envelope"][0]


def test_every_section_is_listed_once_with_its_module_name():
    """The list holds each section once, named as its module, with a title and claims; the
    report draws and lists them in this order (faults first, bottom line last)."""
    from tailtheory.diagnose.sections import SECTIONS

    names = [s.name for s in SECTIONS]
    assert len(set(names)) == len(names) and names[0] == "faults" and names[-1] == "bottom_line"
    for s in SECTIONS:
        module = s.table.__module__
        assert module.startswith("tailtheory.diagnose.sections.") and s.title and s.claims
        assert module.rsplit(".", 1)[1] == s.name


def test_json_safe_and_complete(run):
    import math

    from tailtheory.diagnose.sections.base import complete, json_safe

    assert json_safe({1: [np.int64(2), math.nan, np.float32(0.5), (math.inf,)]}) == \
        {"1": [2, None, 0.5, [None]]}
    acc, d, recs = run
    s = complete(acc)
    assert len(s["n_tok"]) == d.summary["sequences"] == 60 and s["mass"].shape == (60, 4)
    assert s["n_tok"].sum() == len(recs) == d.summary["tokens"]
