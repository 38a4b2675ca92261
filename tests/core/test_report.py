"""The claims' reports (``tailtheory.core.report``): the CLI's table, the notebooks' verdict
report as text and HTML, and ``claims.json`` merged and written deterministically."""

import json
import math

import numpy as np
import pytest

from tailtheory.core.registry import Claim, ClaimResult, Evidence, Verdict
from tailtheory.core.report import (VerdictReport, commands, fmt_number, key_numbers, table,
                                    write_claims_json)


def _result(verdict, numbers, note="", sources=()):
    claim = Claim("X1", "DVP", "a < b", lambda p: None, Verdict.HOLDS)
    return ClaimResult(claim, Evidence(verdict, numbers, note), 0.1, sources=sources)


def test_verdict_report_text_and_html():
    numbers = {"ratio": np.float64(0.123456789), "n": np.int64(1536), "knee": "no",
               "big": 12345.678, **{f"k{i}": float(i) for i in range(400)}}
    rep = VerdictReport([_result(Verdict.REFUTED, numbers, "criterion < 1",
                                 (("m", "TAILTHEORY_PRESET=full python notebooks/04.py"),))],
                        "quick")
    text = str(rep)
    assert "X1  theory: a < b" in text and "ratio=0.1235" in text and "n=1536" in text
    assert "np.float64" not in text and "(+400 more numbers)" in text and len(text) < 1000
    assert "re-measure: TAILTHEORY_PRESET=full python notebooks/04.py" in text
    html = rep._repr_html_()
    assert "#f9d6d5" in html and "REFUTED" in html and "ledger: HOLDS" in html
    assert "<details><summary>all 404 numbers and the note</summary>" in html
    assert "0.1235" in html and "1.235e+04" in html and "np.float64" not in html
    assert "a &lt; b" in html and "criterion &lt; 1" in html
    assert [c for _, c in commands(rep[0], "quick")] == [
        "tailtheory verify --only X1 --profile quick",
        "TAILTHEORY_PRESET=full python notebooks/04.py"]


@pytest.mark.parametrize("verdict,colour", [(Verdict.HOLDS, "#d8f0dc"),
                                            (Verdict.TOY_SCALE, "#e6f2d6"),
                                            (Verdict.NOT_REPRODUCED, "#fdebc8")])
def test_verdict_colours(verdict, colour):
    assert colour in VerdictReport([_result(verdict, {"x": 1.0})])._repr_html_()


def test_numbers_are_short_and_plain():
    assert fmt_number(np.float64(0.123456789)) == "0.123" and fmt_number(np.int64(7)) == "7"
    assert fmt_number(True) == "True" and fmt_number("no") == "no" and fmt_number(None) == "None"
    assert key_numbers(Evidence(Verdict.HOLDS, {"a": 1.0, "b": 2.5, "c": "x"}), limit=2) == "a=1, b=2.5"


def test_table_has_a_row_per_result_and_shows_a_drifted_verdict():
    text = table([_result(Verdict.HOLDS, {"x": 1.0}), _result(Verdict.REFUTED, {"x": 2.0})])
    lines = text.splitlines()
    assert lines[0].split() == ["id", "paper", "verdict", "key", "numbers", "s"]
    assert set(lines[1]) == {"-"} and len(lines) == 4
    assert "ledger: HOLDS" not in lines[2] and "REFUTED (ledger: HOLDS)" in lines[3]


def test_claims_json_merges_in_claim_order_without_timings(tmp_path):
    path = tmp_path / "claims.json"
    later = ClaimResult(Claim("T7", "TRM", "t", lambda p: None, Verdict.HOLDS),
                        Evidence(Verdict.HOLDS, {"y": 1.0}), 3.0)
    write_claims_json([later], path, "quick")
    write_claims_json([_result(Verdict.HOLDS, {"x": 1.0})], path, "thorough")
    claims = json.loads(path.read_text())["claims"]
    assert [c["id"] for c in claims] == ["T7", "X1"]        # sections in order, unknown last
    assert [c["profile"] for c in claims] == ["quick", "thorough"]
    assert all("seconds" not in c for c in claims)
    before = path.read_text()
    write_claims_json([later], path, "quick")
    assert path.read_text() == before                       # the same results, the same file
    for foreign in ("not json", '{"claims": [1]}', '{"claims": [], "model_type": "x"}'):
        path.write_text(foreign)                            # not a claims.json: left alone
        with pytest.raises(ValueError, match="exists and was not written by this tailtheory"):
            write_claims_json([later], path, "quick")
        assert path.read_text() == foreign


def test_run_claim_keeps_the_stored_measurements_a_check_read(tmp_path, monkeypatch):
    from tailtheory.core import measurements
    from tailtheory.core.registry import run_claim

    monkeypatch.setenv(measurements.RESULTS_ENV, str(tmp_path))
    measurements.save_measurement("demo", {"a": 1}, {"x": 2.0}, "make demo")

    def check(profile):
        data = measurements.load_measurement("demo", {"a": 1})
        return Evidence(Verdict.HOLDS, data)

    res = run_claim(Claim("X2", "X", "x", check, Verdict.HOLDS))
    assert res.sources == (("demo", "make demo"),)
    assert commands(res, "quick")[-1] == ("re-measure", "make demo")


def test_claims_json_floats_keep_ten_significant_digits():
    """A last-bit float difference (another library version or CPU) leaves claims.json as is."""
    from tailtheory.core.report import _rounded

    a, b = -0.29308934230882927, -0.2930893423088291          # differ in the last bits
    assert _rounded(a) == _rounded(b) == -0.2930893423
    assert _rounded({"x": [a, 1, "s"], "y": (b,)}) == {"x": [-0.2930893423, 1, "s"],
                                                       "y": [-0.2930893423]}
    assert math.isnan(_rounded(float("nan"))) and _rounded(float("inf")) == float("inf")
