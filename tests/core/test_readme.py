"""The README's claims table regenerated from the ledger (``tailtheory.core.readme``)."""

import pytest

from tailtheory.core.readme import ROOT, ledger_rows, render_table, update_readme

LEDGER = ("| id | paper | claim | verdict | numbers |\n|---|---|---|---|---|\n"
          "| S2 | OTB | a = b | HOLDS | 1e-16 |\n| P4 | DVP | a knee | NOT-REPRODUCED | no |\n")


def test_rows_and_table():
    rows = ledger_rows(LEDGER)
    assert [r[:4] for r in rows] == [["S2", "OTB", "a = b", "HOLDS"],
                                     ["P4", "DVP", "a knee", "NOT-REPRODUCED"]]
    assert render_table(rows).splitlines() == ["| id | paper | claim | verdict |",
                                               "|---|---|---|---|", "| S2 | OTB | a = b | HOLDS |",
                                               "| P4 | DVP | a knee | NOT-REPRODUCED |"]


def test_update_rewrites_only_between_the_markers(tmp_path):
    ledger, readme = tmp_path / "ledger.md", tmp_path / "README.md"
    ledger.write_text(LEDGER)
    readme.write_text("# t\n<!-- claims-table: generated -->\n| old |\n<!-- end claims-table -->\nend\n")
    assert update_readme(readme, ledger) is True
    text = readme.read_text()
    assert text.startswith("# t\n<!-- claims-table: generated -->\n| id | paper |")
    assert "| old |" not in text and text.endswith("<!-- end claims-table -->\nend\n")
    assert update_readme(readme, ledger) is False and readme.read_text() == text
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="no claims-table markers"):
        update_readme(readme, ledger)


def test_the_readme_table_is_current(tmp_path):
    """The checkout's README holds the table its ledger gives (``python -m
    tailtheory.core.readme`` rewrites it)."""
    copy = tmp_path / "README.md"
    copy.write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    assert update_readme(copy, ROOT / "paper_repro.md") is False
