"""What ``verify`` prints about model size (``tailtheory/ladder/report.py``): the rules over named
models first, the first builds' records after them, labelled superseded."""

from __future__ import annotations

from tailtheory.ladder.report import size_report


def test_named_models_come_first_and_the_first_builds_are_labelled_superseded(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    report = size_report()
    family = report.index("Trend family over builds")
    v7 = report.index("V7 with builds as units")
    old = report.index("Superseded (the first builds, whose rows name no model")
    assert family < v7 < old
    assert "none measured (tailtheory measure v7_units)" in report
    assert "V8 share" in report and "PENDING" in report
