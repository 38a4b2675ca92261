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


@pytest.mark.parametrize("command", [[], ["verify"], ["train"], ["sft"], ["methods"], ["study"]])
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
    for name in ("lopti_training", "dvp_training", "otb_training", "mismatch_training"):
        assert f"{name}: " in out and f"results/{name}.json" in out
    assert main(["study", "dvp_training", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "GRPO: " in out and "runs to train on the full preset" in out


def test_study_bad_input_is_one_line(capsys):
    assert main(["study", "nope"]) == 2
    assert "unknown study 'nope'; studies:" in capsys.readouterr().err
    assert main(["study", "dvp_training", "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err


def test_study_store_done_needs_an_incremental_study(capsys):
    assert main(["study", "dvp_training", "--store-done"]) == 2
    assert "--store-done needs an incremental study" in capsys.readouterr().err
