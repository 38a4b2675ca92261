"""The report of ``tailtheory diagnose`` (``tailtheory.diagnose.report``): where it may be
written, and written whole or not at all."""

import shutil

import pytest

from tailtheory.cli import main

from .conftest import write_jsonl
from .test_read import GOOD, _fails


@pytest.mark.slow  # make test-thorough: a long check (make test stays under 15 minutes)
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


def test_header_summarises_many_dumps(tmp_path):
    """Thousands of dumps: the header gives their count, common folder and the first and last
    few names, never the whole list."""
    from pathlib import Path

    from tailtheory.diagnose.report import INPUTS_SHOWN, inputs_line

    files = [Path("/runs/a/tokens") / f"step_{i:06d}.parquet" for i in range(5000)]
    line = inputs_line(files)
    assert line.startswith("5000 dumps in /runs/a/tokens: step_000000.parquet")
    assert f"({5000 - 2 * INPUTS_SHOWN} more)" in line and line.endswith("step_004999.parquet")
    assert line.count("step_") == 2 * INPUTS_SHOWN
    few = inputs_line(files[:2])
    assert few == "2 dumps in /runs/a/tokens: step_000000.parquet, step_000001.parquet"
    assert inputs_line(files[:1]) == "1 dump: /runs/a/tokens/step_000000.parquet"


def test_report_header_of_many_files_is_short(tmp_path):
    d = tmp_path / "d"
    for i in range(12):
        write_jsonl(d / f"{i:03d}.jsonl", GOOD)
    out = tmp_path / "o"
    assert main(["diagnose", str(d), "--out", str(out), "--quiet"]) == 0
    html = (out / "report.html").read_text()
    assert "12 dumps in " in html and "(6 more)" in html and "005.jsonl" not in html
