"""``make repro``'s comparison (``tailtheory.core.repro``): verdicts must match, numbers may move
(listed beyond the tolerance), CSVs and PNGs are compared byte for byte."""

import json
import math
import shutil

import pytest

from tailtheory.core.repro import (NUMBER_ATOL, NUMBER_RTOL, compare_csv, compare_folders, main,
                                   rel_change)

CLAIMS = {"claims": [
    {"id": "S4", "paper": "LOPTI", "statement": "s", "verdict": "HOLDS", "expected": "HOLDS",
     "numbers": {"slack": -2.2e-16, "n": 4096, "tight": "yes"}, "note": "", "error": None,
     "profile": "quick"},
    {"id": "M7", "paper": "TIM", "statement": "m", "verdict": "TOY-SCALE",
     "expected": "TOY-SCALE", "numbers": {"random/fp16/max_ratio_exact": 0.9851444173,
                                          "random/bf16/mean_abs": 0.06136751461},
     "note": "", "error": None, "profile": "quick"}]}
CSV = "p,abs_delta,path\n0.5,0.01,bf16\n0.9,0.002,fp16\n"


@pytest.fixture
def folders(tmp_path):
    """A committed folder and an identical regenerated one."""
    ref, here = tmp_path / "figures", tmp_path / "build" / "repro"
    ref.mkdir()
    (ref / "claims.json").write_text(json.dumps(CLAIMS, indent=2))
    (ref / "fig.csv").write_text(CSV)
    (ref / "fig.png").write_bytes(b"\x89PNG one")
    (ref / "scratch").mkdir()  # a kernel's figures: not compared
    (ref / "scratch" / "x.png").write_bytes(b"x")
    shutil.copytree(ref, here, ignore=shutil.ignore_patterns("scratch"))
    return ref, here


def _edit(here, claim, key, value):
    d = json.loads((here / "claims.json").read_text())
    entry = next(c for c in d["claims"] if c["id"] == claim)
    if key == "verdict":
        entry["verdict"] = value
    else:
        entry["numbers"][key] = value
    (here / "claims.json").write_text(json.dumps(d, indent=2))


def test_rel_change_is_symmetric_and_zero_at_zero():
    assert rel_change(0.0, 0.0) == 0.0
    assert rel_change(1.0, 0.5) == rel_change(0.5, 1.0) == 0.5
    assert rel_change(1.0, -1.0) == 2.0


def test_identical_folders_report_nothing(folders, capsys):
    ref, here = folders
    c = compare_folders(ref, here)
    assert c.ok and not c.numbers and not c.files and not c.missing and not c.extra
    assert c.claims == 2 and c.n_numbers == 5
    assert main([str(ref), str(here)]) == 0
    out = capsys.readouterr().out
    assert "same verdicts (2 claims); all 5 numbers equal; no file differs;" in out
    assert "regenerated ones are in" in out


def test_numbers_may_move_and_are_listed_beyond_the_tolerance(folders, capsys):
    """M7 on an AMD CPU: 0.985 committed, 0.947 there; a float32 last digit and a round-off of
    zero are counted, not listed."""
    ref, here = folders
    _edit(here, "M7", "random/fp16/max_ratio_exact", 0.947)
    _edit(here, "M7", "random/bf16/mean_abs", 0.06136751461 * (1 + NUMBER_RTOL / 10))
    _edit(here, "S4", "slack", -1.1e-16)
    c = compare_folders(ref, here)
    assert c.ok and len(c.numbers) == 3
    assert [(n.claim, n.key) for n in c.beyond] == [("M7", "random/fp16/max_ratio_exact")]
    assert math.isclose(c.max_rel, (0.9851444173 - 0.947) / 0.9851444173)
    assert list(c.files) == ["claims.json"]
    assert main([str(ref), str(here)]) == 0
    out = capsys.readouterr().out
    assert ("M7 random/fp16/max_ratio_exact: committed 0.9851444173, here 0.947, "
            "relative change 0.039") in out
    assert "slack" not in out and "bf16/mean_abs" not in out
    assert "3 of 5 numbers moved by at most 0.039 relative (1 beyond the tolerance)" in out
    assert "these files differ: claims.json;" in out


def test_a_changed_string_or_count_is_beyond_the_tolerance(folders):
    ref, here = folders
    _edit(here, "S4", "tight", "no")
    _edit(here, "S4", "n", 4095)
    c = compare_folders(ref, here)
    assert c.ok and {n.key for n in c.beyond} == {"tight", "n"}
    assert abs(4095 - 4096) > NUMBER_ATOL


def test_a_changed_verdict_fails(folders, capsys):
    ref, here = folders
    _edit(here, "M7", "verdict", "NOT-REPRODUCED")
    c = compare_folders(ref, here)
    assert not c.ok and [(v.claim, v.committed, v.here) for v in c.verdicts] == [
        ("M7", "TOY-SCALE", "NOT-REPRODUCED")]
    assert main([str(ref), str(here)]) == 1
    out = capsys.readouterr().out
    assert "verdicts that differ (a failure):" in out and "VERDICTS DIFFER for M7" in out


def test_a_claim_on_one_side_only_fails(folders):
    ref, here = folders
    d = json.loads((here / "claims.json").read_text())
    d["claims"] = d["claims"][:1]
    (here / "claims.json").write_text(json.dumps(d))
    c = compare_folders(ref, here)
    assert not c.ok and [(v.claim, v.here) for v in c.verdicts] == [("M7", None)]


def test_csvs_and_pngs_that_differ_are_listed(folders, capsys):
    ref, here = folders
    (here / "fig.csv").write_text(CSV.replace("0.002", "0.0021"))
    (here / "fig.png").write_bytes(b"\x89PNG two")
    (here / "new.png").write_bytes(b"new")
    (ref / "old.csv").write_text(CSV)
    c = compare_folders(ref, here)
    assert c.ok and c.files == {"fig.csv": "1 of 6 cells, relative change up to 0.048",
                                "fig.png": ""}
    assert c.missing == ["old.csv"] and c.extra == ["new.png"]
    main([str(ref), str(here)])
    out = capsys.readouterr().out
    assert "CSVs that differ:\n  fig.csv: 1 of 6 cells" in out and "PNGs that differ:\n  fig.png" in out
    assert ("these files differ: fig.csv, fig.png; not regenerated: old.csv; "
            "not committed: new.png;") in out


def test_compare_csv_names_what_differs():
    assert compare_csv(CSV, CSV.replace("path", "route")) == "columns differ"
    assert compare_csv(CSV, CSV + "0.1,0.3,kv\n") == "2 rows committed, 3 here"
    assert compare_csv(CSV, CSV.replace("fp16", "kv")) == (
        "1 of 6 cells, relative change up to a non-number")


def test_a_missing_claims_json_is_exit_status_2(folders, capsys):
    ref, here = folders
    (here / "claims.json").unlink()
    assert main([str(ref), str(here)]) == 2
    assert "claims.json not found (make repro writes it)" in capsys.readouterr().err


def test_a_changed_note_shows_the_part_that_differs(folders, capsys):
    ref, here = folders
    d = json.loads((ref / "claims.json").read_text())
    d["claims"][1]["note"] = ("small = mean < 0.05, heavy = max > 0.1 (bf16), each model on its "
                              "own: random yes (bf16 mean 0.0226, max 0.256), corpus yes")
    (ref / "claims.json").write_text(json.dumps(d))
    d["claims"][1]["note"] = d["claims"][1]["note"].replace("0.0226", "0.0225")
    (here / "claims.json").write_text(json.dumps(d))
    c = compare_folders(ref, here)
    assert c.ok and [(f.claim, f.key) for f in c.fields] == [("M7", "note")]
    assert str(c.fields[0]) == ("M7 note: committed ...'yes (bf16 mean 0.0226, max 0.256), corpus'"
                                "..., here ...'yes (bf16 mean 0.0225, max 0.256), corpus'...")
