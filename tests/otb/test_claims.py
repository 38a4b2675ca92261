"""The checks of OTB's claims (``tailtheory.otb.claims``): each one, run on the quick profile,
measures the verdict the ledger ``paper_repro.md`` records."""

import pytest

from ledger_checks import assert_ledger_verdict
from tailtheory.docs import section_claims


@pytest.mark.parametrize("claim", section_claims("otb"), ids=lambda c: c.id)
def test_quick_check_gives_the_ledger_verdict(claim):
    assert_ledger_verdict(claim)
