"""``tailtheory probe``: each probe family on a user's checkpoint and on one at Qwen's
vocabulary, its files in --out and its summary printed; bad input is one line."""

import json
import shutil

import pytest

from tailtheory.cli import main
from tailtheory.probe.run import TEXT_FAMILIES, out_files, record_name

SMALL = ["--device", "cpu", "--batch", "2", "--length", "16"]


@pytest.mark.parametrize("ckpt", ["user_ckpt", "qwen_ckpt"])
@pytest.mark.parametrize("family", TEXT_FAMILIES)   # decisiveness: tests/probe/test_decisive.py
def test_each_probe_writes_its_csv_and_png(family, ckpt, request, tmp_path, capsys):
    """The family's figures (PNG + CSV), tables and record land in --out; the summary prints."""
    path = request.getfixturevalue(ckpt)
    out = tmp_path / "out"
    assert main(["probe", family, "--model", str(path), *SMALL, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{family} probe of {path} on cpu" in printed and "wrote" in printed
    assert sorted(p.name for p in out.iterdir()) == sorted(out_files(family))
    rec = json.loads((out / record_name(family)).read_text())
    assert rec["config"]["batch"] == 2 and rec["device"] == "cpu"
    assert set(rec["files"]) == set(out_files(family)) - {record_name(family)}
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    for csv in out.glob("*.csv"):
        assert len(csv.read_text().splitlines()) >= 2


@pytest.mark.slow  # make test-thorough: a long check (make test stays under 15 minutes)
def test_a_second_run_replaces_only_its_own_files(user_ckpt, tmp_path, capsys):
    """--out holding files of the probe's names: its own are replaced, anything else is refused
    before any work, naming the file, which is left as it was."""
    out = tmp_path / "out"
    args = ["probe", "mismatch", "--model", str(user_ckpt), *SMALL, "--out", str(out)]
    assert main(args) == 0
    assert main(args) == 0                                       # its own files: replaced
    (out / "mismatch_summary.csv").write_text("my notes\n")
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "mismatch_summary.csv" in err
    assert (out / "mismatch_summary.csv").read_text() == "my notes\n"


def test_bad_input_is_one_line(user_ckpt, tmp_path, capsys):
    """No such path, a folder without a tokenizer, --batch 0, an unknown probe or device,
    --length beyond the model's positions, --out a file: exit 2 and one line, nothing written."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(user_ckpt / f, bare / f)
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    cases = {"does not exist": ["mismatch", "--model", str(tmp_path / "nowhere")],
             "tokenizer": ["pruning", "--model", str(bare)],
             "--batch must be >= 1": ["gradient", "--model", str(user_ckpt), "--batch", "0"],
             "--length must be >= 2": ["mismatch", "--model", str(user_ckpt), "--length", "1"],
             "unknown probe": ["entropy", "--model", str(user_ckpt)],
             "unknown device": ["mismatch", "--model", str(user_ckpt), "--device", "tpu"],
             "max_position_embeddings": ["mismatch", "--model", str(user_ckpt), "--length",
                                         "4096"],
             "is a file": ["mismatch", "--model", str(user_ckpt), "--out", str(afile)]}
    for expected, argv in cases.items():
        out = ["--out", str(tmp_path / "out")] if "--out" not in argv else []
        assert main(["probe", *argv, *out]) == 2, expected
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, (expected, err)
    assert not (tmp_path / "out").exists() and afile.read_text() == "x"
