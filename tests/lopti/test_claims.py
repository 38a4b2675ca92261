"""The checks of LOPTI's claims (``tailtheory.lopti.claims``): each one, run on the quick profile,
measures the verdict the ledger ``paper_repro.md`` records."""

import pytest

from ledger_checks import assert_ledger_verdict
from tailtheory.docs import section_claims


@pytest.mark.parametrize("claim", section_claims("lopti"), ids=lambda c: c.id)
def test_quick_check_gives_the_ledger_verdict(claim):
    assert_ledger_verdict(claim)


def test_the_decide_end_names_the_design_search(monkeypatch):
    """Beside each training verdict, the decide end says why it has none: its GRPO does not
    learn, and the design search chose no design (or which one it chose)."""
    from tailtheory.lopti import claims
    from tailtheory.lopti.decisive import designs

    assert claims._design_search().startswith(
        "no design learns on both tuning seeds and passes the gate (results/decide_designs.json")
    monkeypatch.setattr(designs, "chosen", lambda table, failed: ("people2", "first"))
    assert claims._design_search() == "design people2 chosen, its arms not measured yet"
