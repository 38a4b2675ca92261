"""The checks of the size axis's claims (``tailtheory.ladder.claims``): each one, run on the quick
profile, gives the verdict the ledger ``paper_repro.md`` records, from the stored rows."""

import pytest

from ledger_checks import assert_ledger_verdict
from tailtheory.docs import section_claims


@pytest.mark.parametrize("claim", section_claims("ladder"), ids=lambda c: c.id)
def test_quick_check_gives_the_ledger_verdict(claim):
    assert_ledger_verdict(claim)
