"""Notebook output outside a kernel (files and text, as before) and the verdict report's forms."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tailtheory.core import display, io  # noqa: E402
from tailtheory.core.registry import Claim, ClaimResult, Evidence, Verdict  # noqa: E402
from tailtheory.core.report import VerdictReport, commands  # noqa: E402


def test_outside_a_kernel_show_figure_saves_and_closes(tmp_path, capsys):
    assert not io.in_kernel()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    assert display.show_figure(fig, "demo", pd.DataFrame({"x": [0, 1]}), "Evidence: x.",
                               directory=tmp_path) is None
    assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "demo.csv").exists()
    assert not plt.fignum_exists(fig.number)
    assert capsys.readouterr().out == ""


def test_provenance_says_what_a_figure_shows():
    assert display.provenance("runs", "quick").startswith("Quick pipeline check:")
    assert display.provenance("stored", "quick", "results/a.json").startswith("Stored evidence:")
    assert "results/a.json" in display.provenance("stored", "full", "results/a.json")
    assert display.provenance("measured", "full").startswith("Evidence:")
    with pytest.raises(ValueError, match="kind"):
        display.provenance("guess", "quick")


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


def test_verdict_report_prints_and_asserts_the_ledger_verdict(monkeypatch, capsys):
    """The notebooks' closing cell: prints theory next to measurement, fails on a verdict that
    differs from the ledger's."""
    from tailtheory.core import registry

    out = display.verdict_report(["S2"], "quick")
    assert [r.claim.id for r in out] == ["S2"]
    assert "S2  theory:" in capsys.readouterr().out
    claim = registry.all_claims()["S2"]
    wrong = registry.Claim(claim.id, claim.paper, claim.statement,
                           lambda profile: Evidence(Verdict.REFUTED, {"x": 1.0}), claim.expected)
    monkeypatch.setattr(registry, "select", lambda ids: [wrong])
    with pytest.raises(AssertionError, match="differ from the ledger"):
        display.verdict_report(["S2"], "quick")
