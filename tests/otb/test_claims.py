"""The checks of OTB's claims (``tailtheory.otb.claims``): each one, run on the quick profile,
measures the verdict the ledger ``paper_repro.md`` records."""

import pytest

from tailtheory.core.docs import section_claims
from tailtheory.core.registry import run_claim


@pytest.mark.parametrize("claim", section_claims("otb"), ids=lambda c: c.id)
def test_quick_check_gives_the_ledger_verdict(claim):
    res = run_claim(claim, "quick")
    assert res.error is None, res.traceback
    assert res.evidence.verdict == claim.expected, (res.evidence.verdict, res.evidence.numbers)
