"""The ``tailtheory`` command line (``tailtheory/cli.py``): version, self-contained help with
defaults, one-line errors, Ctrl-C, and a ``claims.json`` that the same code writes byte for byte."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tailtheory import __version__
from tailtheory.cli import build_parser, main
from tailtheory.engine import trainer
from tailtheory.engine.checkpoint import read_metrics

REPO = Path(__file__).resolve().parents[1]
TINY_TRAIN = ["train", "--task", "kk", "--n-people", "2", "--model", "tiny", "--prompts-per-step",
              "2", "--group-size", "2", "--quiet"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"tailtheory {__version__}"


@pytest.mark.parametrize("command", [[], ["verify"], ["train"], ["sft"], ["methods"], ["study"],
                                     ["ladder"], ["measure"]])
def test_help_is_self_contained_and_shows_defaults(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    for name in re.findall(r"[\w./-]+\.md\b", text):  # only files this repository has
        assert (REPO / name).exists(), f"help of {command} refers to {name}"
    sub = build_parser()._subparsers._group_actions[0].choices.get(command[0]) if command else None
    for action in (sub or build_parser())._actions:
        if action.default not in (None, False, "==SUPPRESS==") and action.help:
            assert f"(default: {action.default})" in " ".join(text.split()) or \
                "(default:" in action.help, action.dest


def test_out_that_is_a_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main([*TINY_TRAIN, "--steps", "1", "--out", str(f)]) == 2
    assert "is a file, not a directory" in _one_line_error(capsys) and f.read_text() == "x"


def test_resume_with_fewer_steps_than_done_is_one_line(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main([*TINY_TRAIN, "--steps", "2", "--out", out]) == 0
    capsys.readouterr()
    assert main([*TINY_TRAIN, "--steps", "1", "--out", out, "--resume"]) == 2
    err = _one_line_error(capsys)
    assert "--steps 1 is fewer than the 2 steps" in err and "--steps 2 or more" in err
    assert [m["step"] for m in read_metrics(out)] == [0, 1]  # nothing was touched


def test_bad_thread_count_is_one_line(tmp_path, capsys):
    assert main([*TINY_TRAIN, "--threads", "-1", "--out", str(tmp_path / "r")]) == 2
    assert "threads must be an integer >= 0" in _one_line_error(capsys)
    assert not (tmp_path / "r").exists()


def test_ctrl_c_prints_the_command_that_continues(tmp_path, capsys, monkeypatch):
    """Ctrl-C at step 2 (checkpoint at 1): exit status 130, one line holding the exact command;
    that command finishes the run."""
    out = str(tmp_path / "my run")  # a space: the printed command must quote it
    real_step = trainer.train_step

    def ctrl_c_at_2(step, *args, **kw):
        if step == 2:
            raise KeyboardInterrupt
        return real_step(step, *args, **kw)

    monkeypatch.setattr(trainer, "train_step", ctrl_c_at_2)
    argv = [*TINY_TRAIN, "--steps", "3", "--checkpoint-every", "1", "--out", out]
    assert main(argv) == 130
    err = _one_line_error(capsys)
    command = err.split("continue the run with: ", 1)[1].strip()
    assert shlex.split(command) == ["tailtheory", *argv, "--resume"]
    monkeypatch.setattr(trainer, "train_step", real_step)
    assert main(shlex.split(command)[1:]) == 0
    assert [m["step"] for m in read_metrics(out)] == [0, 1, 2]


FAST_CLAIMS = "M1,T9,T11,O1"
"""Checks that take milliseconds."""


def test_verify_writes_the_same_claims_json_twice(tmp_path, capsys):
    """Timings are printed, not written: two runs give byte-identical files, and an older file
    with timings loses them on its next rewrite."""
    out = tmp_path / "claims.json"
    out.write_text(json.dumps({"claims": [{"id": "S1", "verdict": "HOLDS", "seconds": 1.5}]}))
    blobs = []
    for _ in range(2):
        assert main(["verify", "--only", FAST_CLAIMS, "--out", str(out), "--quiet"]) == 0
        blobs.append(out.read_bytes())
    assert blobs[0] == blobs[1]
    claims = json.loads(blobs[0])["claims"]
    assert [c["id"] for c in claims] == ["S1", "M1", "T9", "T11", "O1"]
    assert not any("seconds" in c for c in claims)
    table = capsys.readouterr().out
    assert re.search(r"M1 .* \d+\.\d\n", table)  # the timing column is in the printed table


@pytest.mark.parametrize("flag, used", [([], 1), (["--threads", "2"], 2)])
def test_train_threads(flag, used, tmp_path, monkeypatch):
    """The tiny model trains on one thread by default, on ``--threads N`` when given; the
    caller's count is back afterwards."""
    import torch

    seen, real_step = [], trainer.train_step
    monkeypatch.setattr(trainer, "train_step", lambda *a, **k: seen.append(
        torch.get_num_threads()) or real_step(*a, **k))
    before = torch.get_num_threads()
    assert main([*TINY_TRAIN, "--steps", "1", *flag, "--out", str(tmp_path / "r")]) == 0
    assert seen == [used] and torch.get_num_threads() == before


def test_study_list_and_dry_run_count_runs(capsys):
    assert main(["study", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("lopti_learn", "dvp_learn", "otb_learn", "mismatch_learn", "mismatch_dose"):
        assert f"{name}: " in out and f"results/{name}.json" in out
    assert main(["study", "dvp_learn", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "GRPO: 5 stored" in out and re.search(r"25 runs on the learn preset: 25 stored in "
                                                 r"results/dvp_learn.json, 0 cached in the run "
                                                 r"cache, 0 to train", out)


def test_study_bad_input_is_one_line(capsys):
    assert main(["study", "nope"]) == 2
    assert "unknown study 'nope'; studies:" in capsys.readouterr().err
    assert main(["study", "dvp_learn", "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err


# --- nothing a user made is lost: --out refuses foreign files, damage is one line ------------------

@pytest.mark.parametrize("foreign", ["notes.txt", "config.json"])
def test_verify_out_refuses_a_file_it_did_not_write(foreign, tmp_path, capsys):
    out = tmp_path / foreign
    text = "my notes\n" if foreign == "notes.txt" else '{"model_type": "llama", "claims": []}\n'
    out.write_text(text)
    assert main(["verify", "--only", "M1", "--out", str(out), "--quiet"]) == 2
    err = _one_line_error(capsys)
    assert f"--out {out} exists and was not written by this tailtheory command" in err
    assert out.read_text() == text


def test_verify_out_on_a_folder_is_one_line(tmp_path, capsys):
    assert main(["verify", "--only", "M1", "--out", str(tmp_path), "--quiet"]) == 2
    assert f"--out {tmp_path} is a folder" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_plot_out_replaces_its_own_files_only(tmp_path, capsys):
    """``tailtheory plot`` rewrites the PNG and CSV it wrote; a PNG or CSV of anyone else, or a
    folder, is refused before anything is drawn, and left as it was."""
    from tailtheory.engine.checkpoint import read_metrics as lines

    run = tmp_path / "run"
    assert main([*TINY_TRAIN, "--steps", "1", "--out", str(run)]) == 0
    assert len(lines(run)) == 1
    png = tmp_path / "my.png"
    assert main(["plot", str(run), "--out", str(png)]) == 0
    assert main(["plot", str(run), "--out", str(png)]) == 0       # its own files: replaced
    capsys.readouterr()
    for name, other in (("mine.png", "mine.csv"), ("theirs.png", "theirs.png")):
        png, csv = tmp_path / name, (tmp_path / name).with_suffix(".csv")
        (tmp_path / other).write_bytes(b"\x89PNG\r\n\x1a\nsomeone else's")
        before = {p: p.read_bytes() for p in (png, csv) if p.exists()}
        assert main(["plot", str(run), "--out", str(png)]) == 2
        err = _one_line_error(capsys)
        assert f"{tmp_path / other} exists and was not written by this tailtheory" in err
        assert {p: p.read_bytes() for p in (png, csv) if p.exists()} == before
    (tmp_path / "dir.png").mkdir()
    assert main(["plot", str(run), "--out", str(tmp_path / "dir.png")]) == 2
    assert "is a folder" in _one_line_error(capsys)


def test_damaged_weights_are_one_line_naming_the_file(tmp_path, capsys):
    """A half-written ``model.safetensors`` (a copy cut short): exit 2 and one line naming the
    file and the way out, no SafetensorError traceback."""
    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.tasks.tokenizer import build_tokenizer

    model = tmp_path / "model"
    tiny_lm(layers=1).save_pretrained(model)
    build_tokenizer().save_pretrained(model)          # a folder that is complete, but for that
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    capsys.readouterr()                               # save_pretrained's progress bar
    assert main([*TINY_TRAIN, "--model", str(model), "--steps", "1",
                 "--out", str(tmp_path / "run")]) == 2
    err = _one_line_error(capsys)
    assert f"{weights}: damaged safetensors file, truncated or partly written" in err
    assert "save_pretrained" in err and "SafetensorError" not in err


@pytest.fixture
def demo_study(monkeypatch, tmp_path):
    """A registered study of 2 arms x 3 seeds on the quick preset, its cache and
    results in ``tmp_path``."""
    from tailtheory.experiments import study as study_mod
    from tests.experiments.test_incremental import _study

    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))
    (tmp_path / "results").mkdir()
    st = _study()
    monkeypatch.setitem(study_mod._STUDIES, st.name, st)
    return st


def test_study_dry_run_counts_stored_runs(demo_study, monkeypatch, capsys):
    """Runs stored in ``results/NAME.json`` are present although this machine's run cache lacks
    them; ``tailtheory study NAME`` then trains only the rest."""
    import shutil

    from tailtheory.experiments import incremental

    from tailtheory.experiments import runs
    from tests.experiments.test_incremental import _finish

    grpo, ar = (a.configs for a in demo_study.plan("quick"))
    _finish(grpo[0]), _finish(grpo[1])
    incremental.store_done(demo_study)
    shutil.rmtree(runs.runs_root())                   # a fresh clone: results/, no run cache
    _finish(ar[0])
    assert main(["study", demo_study.name, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "GRPO: 2 stored, 0 cached, 1 to train" in out
    assert "AR: 0 stored, 1 cached, 2 to train" in out
    assert (f"6 runs on the quick preset: 2 stored in results/{demo_study.name}.json, 1 cached "
            f"in the run cache, 3 to train") in out
    trained, stored = [], []

    def fake_run_many(cs, on_done=None, **kw):
        for c in cs:
            trained.append(c), _finish(c), on_done(c)
            record = incremental.stored_record(demo_study.name)
            stored.append(sum(len(rows) for rows in record["data"].values()))
        return []

    monkeypatch.setattr(runs, "run_many", fake_run_many)
    assert main(["study", demo_study.name]) == 0
    assert trained == [ar[1], grpo[2], ar[2]]        # seed by seed across the arms
    assert stored == [4, 5, 6]                       # each run stored as it finished
    assert f"stored 6 runs in results/{demo_study.name}.json" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--out", "FILE"], "is a file; choose a new folder"),
    (["--rho", "0.1,x"], "--rho must be comma-separated numbers"),
    (["--rho", "2"], "--rho values must lie in (0, 1]"),
    (["--tail-p", "0.95"], "need 0 < --tail-p <= --head-p < 1"),
    (["--batch-rows", "0"], "--batch-rows must be >= 1"),
    (["--max-excluded", "2"], "--max-excluded must lie in [0, 1]"),
    (["--trm-delta-max", "0"], "TRM thresholds must be > 0"),
])
def test_diagnose_bad_options_are_one_line(flags, message, tmp_path, capsys):
    """Checked before any dump is read: one line, exit 2, nothing written (an --out file kept)."""
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    flags = [str(f) if a == "FILE" else a for a in flags]
    out = [] if "--out" in flags else ["--out", str(tmp_path / "report")]
    assert main(["diagnose", str(tmp_path / "no-dump.parquet"), *out, *flags, "--quiet"]) == 2
    assert message in _one_line_error(capsys)
    assert f.read_text() == "mine" and not (tmp_path / "report").exists()


def test_verify_writes_to_the_build_folder_not_the_committed_reference(tmp_path, monkeypatch):
    """Without ``--out`` or ``$TAILTHEORY_FIGURES``, ``verify`` writes ``build/repro/claims.json``
    of the checkout; the committed ``figures/claims.json`` is left as it was."""
    from tailtheory.core import io

    (tmp_path / "pyproject.toml").write_text("")
    committed = tmp_path / "figures" / "claims.json"
    committed.parent.mkdir()
    committed.write_text('{"claims": []}')
    monkeypatch.setattr(io, "REPO_ROOT", tmp_path)
    monkeypatch.delenv(io.FIGURES_ENV, raising=False)
    assert main(["verify", "--only", "S2", "--quiet"]) == 0
    written = json.loads((tmp_path / "build" / "repro" / "claims.json").read_text())
    assert [c["id"] for c in written["claims"]] == ["S2"]
    assert committed.read_text() == '{"claims": []}'
    monkeypatch.setenv(io.FIGURES_ENV, str(tmp_path / "figures"))  # what `make figures` sets
    assert main(["verify", "--only", "S2", "--quiet"]) == 0
    assert [c["id"] for c in json.loads(committed.read_text())["claims"]] == ["S2"]


def test_a_reader_that_leaves_stops_the_command_quietly():
    """``tailtheory measure list | head -1``: when the reader of stdout is gone, the command
    ends with the shell's SIGPIPE status and no traceback (here the reading end is closed before
    the command writes, so the write always fails)."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "tailtheory.cli", "measure", "list"],
                              stdout=w, stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    finally:
        os.close(w)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr, proc.stderr
