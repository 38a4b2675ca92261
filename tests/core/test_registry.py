"""The claims registry, the ``verify`` command, and the ledger that must not drift."""

import json
from pathlib import Path

import pytest

from tailtheory.core.registry import (Evidence, Verdict, all_claims, pick, register, run_claim,
                                      select)
from tailtheory.core.ledger import docs_verdicts, ledger_verdicts, readme_verdicts
from tailtheory.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_ids_are_listed():
    with pytest.raises(ValueError, match="registered:"):
        select(["Z99"])


def test_bad_id_and_double_registration_rejected():
    with pytest.raises(ValueError, match="look like"):
        register("bad", paper="X", statement="x", expected=Verdict.HOLDS)
    first = next(iter(all_claims()))
    with pytest.raises(ValueError, match="twice"):
        register(first, paper="X", statement="x", expected=Verdict.HOLDS)(lambda p: None)


def test_pick_rejects_unknown_profile():
    assert pick("quick", 1, 2) == 1 and pick("thorough", 1, 2) == 2
    with pytest.raises(ValueError, match="profile"):
        pick("fast", 1, 2)


def test_failing_check_is_reported_not_raised():
    from tailtheory.core.registry import Claim

    def boom(profile):
        raise RuntimeError("kaput")

    res = run_claim(Claim("X1", "X", "x", boom, Verdict.HOLDS))
    assert res.failed and res.verdict == "ERROR" and "kaput" in res.error
    res = run_claim(Claim("X2", "X", "x", lambda p: Evidence(Verdict.REFUTED, {}), Verdict.HOLDS))
    assert res.failed and res.drifted


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


@pytest.mark.parametrize("cid", list(all_claims()))
def test_quick_check_gives_ledger_verdict(cid):
    """Each check, run on the quick profile, measures the verdict the ledger records."""
    res = run_claim(all_claims()[cid], "quick")
    assert res.error is None, res.traceback
    assert res.evidence.verdict == res.claim.expected, (res.evidence.verdict, res.evidence.numbers)


def test_verify_cli_writes_json(tmp_path, capsys):
    first = next(iter(all_claims()))
    out = tmp_path / "claims.json"
    rc = main(["verify", "--only", first, "--out", str(out), "--quiet"])
    text = capsys.readouterr().out
    assert rc == 0 and first in text and "verdict" in text
    data = json.loads(out.read_text())
    assert [c["id"] for c in data["claims"]] == [first]


def test_verify_cli_unknown_id_exits_2(capsys):
    assert main(["verify", "--only", "Q42", "--quiet"]) == 2
    assert "unknown claim" in capsys.readouterr().err
