"""The per-section check that each registered claim, run on the quick profile, measures the
verdict the ledger ``paper_repro.md`` records (``tests/<section>/test_claims.py`` call it)."""

from tailtheory.core.registry import run_claim


def assert_ledger_verdict(claim) -> None:
    """Run ``claim`` on the quick profile: no error, and the ledger's verdict."""
    res = run_claim(claim, "quick")
    assert res.error is None, res.traceback
    assert res.evidence.verdict == claim.expected, (res.evidence.verdict, res.evidence.numbers)
