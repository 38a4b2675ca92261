"""The bottom line (``tailtheory.diagnose.sections.bottom_line``): last, one line, in the summary
too, always with the caveat of scale."""

from tailtheory.diagnose.register import ACTIONS
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.bottom_line import SECTION


def test_bottom_line_last(run):
    acc, d, recs = run
    assert SECTIONS[-1] is SECTION and list(d.verdicts)[-1] == "bottom_line"
    assert d.summary["bottom_line"]["action"] in ACTIONS
    assert d.verdicts["bottom_line"] == [d.summary["bottom_line"]["text"]]
    assert "caveat" in d.summary["bottom_line"]["text"]
