"""The verdicts read out of ``paper_repro.md``, the README and ``docs/claims.md``
(``tailtheory.core.ledger``), and the ledger that must not drift from the registry."""

import json
from pathlib import Path

import pytest

from tailtheory.core.ledger import docs_verdicts, ledger_verdicts, readme_verdicts, table_verdicts
from tailtheory.core.registry import all_claims

ROOT = Path(__file__).resolve().parents[2]


def test_table_verdicts_reads_claim_rows_only():
    text = ("| id | paper | claim | verdict |\n|---|---|---|---|\n"
            "| S2 | OTB | a | **HOLDS** |\n| T10 | TRM | b | REFUTED |\n| note | - | - | - |\n")
    assert table_verdicts(text, 3) == {"S2": "HOLDS", "T10": "REFUTED"}
    with pytest.raises(ValueError, match="S2 appears twice"):
        table_verdicts(text + "| S2 | OTB | a | HOLDS |\n", 3)


def test_ledger_matches_registry():
    """Every registered claim has one row in paper_repro.md with the registered verdict."""
    ledger = ledger_verdicts(ROOT / "paper_repro.md")
    registered = {cid: c.expected.value for cid, c in all_claims().items()}
    missing = sorted(set(registered) - set(ledger))
    assert not missing, f"claims without a ledger row: {missing}"
    for cid, verdict in registered.items():
        assert ledger[cid] == verdict, f"{cid}: ledger says {ledger[cid]}, code expects {verdict}"


def test_readme_table_matches_ledger():
    ledger = ledger_verdicts(ROOT / "paper_repro.md")
    readme = readme_verdicts(ROOT / "README.md")
    for cid, verdict in ledger.items():
        assert readme.get(cid) == verdict, f"README says {readme.get(cid)} for {cid}, ledger {verdict}"


def test_committed_claims_json_matches_ledger():
    path = ROOT / "figures" / "claims.json"
    if not path.exists():
        pytest.skip("figures/claims.json not generated yet (make repro)")
    ledger = ledger_verdicts(ROOT / "paper_repro.md")
    for c in json.loads(path.read_text())["claims"]:
        if c["id"] in ledger:
            assert c["verdict"] == ledger[c["id"]], f"claims.json {c['id']}: {c['verdict']}"


def test_registered_claims_are_documented():
    """Every registered claim has a row in docs/claims.md with the verdict the code expects, and
    the docs list no claim the registry lacks."""
    documented = docs_verdicts(ROOT / "docs" / "claims.md")
    registered = {cid: c.expected.value for cid, c in all_claims().items()}
    assert documented == registered
