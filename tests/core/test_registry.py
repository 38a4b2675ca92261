"""The claims registry and the ``verify`` command; the ledger is ``test_ledger.py``, each
section's quick checks its ``test_claims.py``."""

import json

import pytest

from tailtheory.core.registry import (Evidence, Verdict, all_claims, pick, register, run_claim,
                                      select)
from tailtheory.cli import main


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


def test_every_claim_belongs_to_a_section():
    """Each section's ``tests/<section>/test_claims.py`` runs its quick checks: together they
    cover every registered claim."""
    from tailtheory.docs import DOC_SECTIONS, section_claims

    found = [c.id for s in DOC_SECTIONS for c in section_claims(s)]
    assert sorted(found) == sorted(all_claims()) and len(found) == len(set(found))


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


def test_superseding_keeps_the_new_evidence_and_names_the_recorded_verdict():
    new = Evidence(Verdict.REFUTED, {"x": 1.0}, "note")
    out = new.superseding("L2")
    assert out.verdict == Verdict.REFUTED and out.note == "note"
    assert out.numbers == {"measured on": "learn recipe", "x": 1.0, "rollout decoder": "fast",
                           "no-learning regime (superseded): verdict": "NOT-REPRODUCED"}
    assert list(out.numbers)[0] == "measured on"           # first: shown by `tailtheory verify`
    assert new.numbers == {"x": 1.0}                       # the original is not changed
    with pytest.raises(KeyError, match="no superseded verdict recorded for 'S1'"):
        new.superseding("S1")


def test_beside_puts_the_papers_regime_first_and_today_beside_it():
    """The claim's verdict is the matched recipe's; the learn recipe's verdict, key numbers and
    superseded verdict follow under their name, and the key names both verdicts."""
    today = Evidence(Verdict.NOT_REPRODUCED, {"y": 2.0, "z": 3.0}, "old", ("y",)).superseding("L4")
    matched = Evidence(Verdict.TOY_SCALE, {"measured on": "x", "a": 1.0, "b": 4.0}, "new",
                       ("a", "b", "a", "b"))
    out = matched.beside(today)
    assert out.verdict == Verdict.TOY_SCALE and out.note == "new"
    assert list(out.numbers)[:3] == ["measured on", "a", "b"]
    assert out.numbers["measured on"] == "matched recipe (papers' regime)"
    assert out.numbers["learn recipe: verdict"] == "NOT-REPRODUCED"
    assert out.numbers["learn recipe: y"] == 2.0 and "learn recipe: z" not in out.numbers
    assert out.numbers["no-learning regime (superseded): verdict"] == "NOT-REPRODUCED"
    assert out.key == ("a", "b", "a", "learn recipe: verdict")
    assert ("learn recipe: verdict", "NOT-REPRODUCED") in out.key_items()


def test_superseded_verdicts_are_recorded_for_the_eleven_training_claims():
    """Recorded once, with the numbers of the check that gave them; their stored runs beside."""
    from tailtheory.core.io import REPO_ROOT
    from tailtheory.core.registry import SUPERSEDED

    record = json.loads(SUPERSEDED.read_text())
    assert sorted(record) == sorted(["L2", "L3", "L4", "L5", "L6", "P5", "T14", "O6", "V3",
                                     "V4", "V5"])
    for claim, r in record.items():
        assert Verdict(r["verdict"]) and r["numbers"] and r["note"], claim
        assert (REPO_ROOT / r["stored"]).exists(), claim


def test_key_items_show_the_deciding_numbers_not_the_context():
    """Reports show the numbers a verdict rests on: a check's ``key`` in its order, else the first
    numbers that are not context (where, on which decoder, the superseded verdict)."""
    ev = Evidence(Verdict.REFUTED, {"x": 1.0, "y": 2.0}).superseding("L2")
    assert ev.key_items(4) == [("x", 1.0), ("y", 2.0)]
    keyed = Evidence(Verdict.REFUTED, {"a": 1, "b": 2, "c": 3}, key=("c", "a", "gone"))
    assert keyed.key_items(4) == [("c", 3), ("a", 1)]
    assert keyed.with_numbers({"d": 4}).key == ("c", "a", "gone")       # kept by with_numbers


@pytest.mark.parametrize("row, unrecorded", [
    ({"x": 1.0}, True),                                          # names nothing
    ({"x": 1.0, "weights": "0123456789abcdef"}, True),          # a model without its machine
    ({"x": 1.0, "weights": "0123456789abcdef", "machine": "AMD EPYC (AVX512)"}, False),
])
def test_a_verdict_on_rows_of_an_unrecorded_model_is_set_aside(tmp_path, monkeypatch, row,
                                                               unrecorded):
    """A check reading a store whose rows name no model (or no machine) reads PENDING, the
    verdict those rows give kept beside as context with the store and its command named; a store
    whose rows name both leaves the verdict as the check made it."""
    from tailtheory.core import measurements as ms
    from tailtheory.core.registry import Claim

    monkeypatch.setenv(ms.RESULTS_ENV, str(tmp_path))
    ms.save_measurement("probe_x", {"n": 1}, {"rows": [row]}, "tailtheory measure probe_x")

    def check(profile):
        data = ms.load_measurement("probe_x", {"n": 1})
        return Evidence(Verdict.REFUTED, {"x": data["rows"][0]["x"]}, "a counterexample")

    res = run_claim(Claim("X3", "X", "x", check, Verdict.REFUTED))
    assert ms.unrecorded("probe_x") is unrecorded
    if unrecorded:
        ev = res.evidence
        assert ev.verdict == Verdict.PENDING and res.drifted
        assert ev.numbers["verdict_on_unrecorded_rows"] == "REFUTED"
        assert ev.numbers["unrecorded_stores"] == "probe_x" and ev.numbers["x"] == 1.0
        assert "tailtheory measure probe_x" in ev.note and ev.note.endswith("a counterexample")
        assert [k for k, _ in ev.key_items()][:2] == ["verdict_on_unrecorded_rows",
                                                      "unrecorded_stores"]
    else:
        assert res.evidence.verdict == Verdict.REFUTED and not res.drifted
    assert not ms.unrecorded("no_such_store")
    ms.save_measurement("not_started", {"n": 1}, {"arm": []}, "tailtheory study not_started")
    assert not ms.unrecorded("not_started")                      # no rows yet: nothing to name


def test_context_from_an_unrecorded_model_is_named_but_does_not_set_the_verdict_aside(
        tmp_path, monkeypatch):
    """A store read only as context (``as_context``: a number beside the verdict) leaves the
    verdict standing and is named in the note; the same store read outside the block decides."""
    from tailtheory.core import measurements as ms
    from tailtheory.core.registry import Claim

    monkeypatch.setenv(ms.RESULTS_ENV, str(tmp_path))
    ms.save_measurement("beside_x", {"n": 1}, {"rows": [{"x": 2.0}]}, "tailtheory measure beside_x")

    def check(profile, decide=False):
        if decide:
            ms.load_measurement("beside_x", {"n": 1})
        with ms.as_context():
            ms.load_measurement("beside_x", {"n": 1})
        return Evidence(Verdict.HOLDS, {"y": 1})

    res = run_claim(Claim("X4", "X", "x", check, Verdict.HOLDS))
    assert res.evidence.verdict == Verdict.HOLDS and "beside_x" in res.evidence.note
    assert "not judged" in res.evidence.note
    res = run_claim(Claim("X5", "X", "x", lambda p: check(p, decide=True), Verdict.HOLDS))
    assert res.evidence.verdict == Verdict.PENDING and res.failed
