"""What the sections of ``tailtheory diagnose`` share (``tailtheory.diagnose.sections.base``):
the grouping of a statistic into bins, the wording, the list of records and the summary keys
each record names."""

import numpy as np

from tailtheory.diagnose.sections.base import group_bins

from .conftest import DELTA_AVG, DELTA_MAX


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


class _Writes(dict):
    """A summary that records the keys written into it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.written = set()

    def __setitem__(self, key, value):
        self.written.add(key)
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


def test_each_section_writes_the_summary_keys_its_record_names(run):
    """A section's table writes exactly the keys of its record's ``summary``, and no other
    section's (the run's own keys are written before any section)."""
    from tailtheory.diagnose.build import RUN_KEYS
    from tailtheory.diagnose.sections import SECTIONS
    from tailtheory.diagnose.sections.base import Context, Diagnosis, complete, json_safe

    acc, d, recs = run
    ctx = Context(acc, complete(acc), DELTA_MAX, DELTA_AVG, register=[])
    fresh = Diagnosis(summary=_Writes({k: d.summary[k] for k in RUN_KEYS}))
    for s in SECTIONS:
        fresh.summary.written = set()
        s.table(ctx, fresh)
        assert fresh.summary.written == set(s.summary), s.name
    assert json_safe(dict(fresh.summary)) == json_safe(d.summary)        # every key, once
