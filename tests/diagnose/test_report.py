"""The report of ``tailtheory diagnose`` (``tailtheory.diagnose.report``): where it may be
written, and written whole or not at all."""

import shutil

from tailtheory.cli import main

from .conftest import write_jsonl
from .test_read import GOOD, _fails


def test_out_folder_rules(capsys, tmp_path, monkeypatch):
    """A folder that is not a diagnose output is refused and untouched; an earlier output is
    replaced whole; a failure while writing leaves neither a report nor a temporary folder."""
    f = write_jsonl(tmp_path / "d.jsonl", GOOD)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    assert main(["diagnose", str(f), "--out", str(notes), "--quiet"]) == 2
    assert "is not a diagnose output" in capsys.readouterr().err
    assert [p.name for p in notes.iterdir()] == ["keep.txt"]
    out = tmp_path / "out"
    assert main(["diagnose", str(f), "--out", str(out), "--quiet"]) == 0
    (out / "stale.png").write_bytes(b"x")
    assert main(["diagnose", str(f), "--out", str(out), "--quiet"]) == 0
    assert (out / "report.html").is_file() and not (out / "stale.png").exists()

    import tailtheory.diagnose.report as report

    def boom(*a, **k):
        raise ValueError("figure failed")

    monkeypatch.setattr(report, "draw_all", boom)
    shutil.rmtree(out)
    _fails(capsys, tmp_path, f, match="figure failed")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
