"""Checkpoints and the metrics file (``tailtheory/engine/checkpoint.py``): loading never runs code,
a damaged checkpoint is one clear error with a fallback kept, a torn metrics line does not block
``--resume``, and lines lost before the checkpoint are refused (never resumed over or plotted)."""

from __future__ import annotations

import json
import os
import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tailtheory.cli import main
from tailtheory.engine import checkpoint as ckpt_io
from tailtheory.engine.checkpoint import (CHECKPOINT, METRICS, PREVIOUS, CheckpointError,
                                          MetricsGapError, load_checkpoint, read_checkpoint,
                                          read_metrics, save_checkpoint, truncate_metrics)
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rundir import MARKER
from tailtheory.engine.trainer import train
from tests.engine.test_trainer import SMALL, DenseKK, no_time

REPO = Path(__file__).resolve().parents[2]


class RunsACommand:
    """Unpickling this object runs ``touch MARKER_PATH`` (what a crafted checkpoint would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _parts(tmp_path, steps=3):
    cfg = TrainConfig(**SMALL, steps=steps, out=str(tmp_path / "run"))
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    return cfg, model, opt, torch.Generator().manual_seed(5)


def test_checkpoint_loads_without_pickled_objects_and_restores_every_rng(tmp_path):
    cfg, model, opt, g = _parts(tmp_path)
    run = Path(cfg.out)
    np.random.seed(3), random.seed(4), torch.manual_seed(6)
    np.random.standard_normal()  # numpy's cached Gaussian is part of its state
    save_checkpoint(run, 1, model, opt, g, cfg)
    want = (torch.rand(3, generator=g), torch.rand(3), np.random.standard_normal(3),
            random.random())
    state = torch.load(run / CHECKPOINT, weights_only=True)  # plain data only
    assert state["step"] == 1 and state["config"] == cfg.to_dict()
    ckpt_io.set_rng_state(load_checkpoint(run, cfg)["rng"], g)
    got = (torch.rand(3, generator=g), torch.rand(3), np.random.standard_normal(3), random.random())
    assert all(torch.equal(a, b) for a, b in zip(want[:2], got[:2]))
    assert np.array_equal(want[2], got[2]) and want[3] == got[3]


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_crafted_checkpoint_is_refused_and_runs_nothing(how, tmp_path, capsys):
    """A ``checkpoint.pt`` whose unpickling would run a command: ``--resume`` refuses it with one
    line naming the file, and the command never runs."""
    run, marker = tmp_path / "run", tmp_path / "pwned"
    run.mkdir()
    (run / MARKER).write_text("tailtheory run directory\n")
    payload = {"step": RunsACommand(marker), "model": {}, "optimizer": {}, "rng": {},
               "config": {}, "fingerprint": ""}
    if how == "torch.save":
        torch.save(payload, run / CHECKPOINT)
    else:
        (run / CHECKPOINT).write_bytes(pickle.dumps(payload))
    with pytest.raises(CheckpointError, match=re.escape(str(run / CHECKPOINT))):
        read_checkpoint(run / CHECKPOINT)
    rc = main(["train", "--model", "tiny", "--out", str(run), "--resume", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "could run code" in err and str(run / CHECKPOINT) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()


def test_no_unsafe_torch_load_in_the_package():
    """Every ``torch.load`` in ``tailtheory/`` reads with ``weights_only=True``."""
    for path in (REPO / "tailtheory").rglob("*.py"):
        for call in re.findall(r"torch\.load\(([^)]*)\)", path.read_text()):
            assert "weights_only=True" in call, f"{path}: torch.load({call})"


def test_damaged_checkpoint_names_the_file_and_keeps_the_previous(tmp_path):
    cfg, model, opt, g = _parts(tmp_path)
    run = Path(cfg.out)
    save_checkpoint(run, 1, model, opt, g, cfg)
    assert not (run / PREVIOUS).exists()
    save_checkpoint(run, 2, model, opt, g, cfg)
    assert read_checkpoint(run / PREVIOUS)["step"] == 1 and load_checkpoint(run, cfg)["step"] == 2
    data = (run / CHECKPOINT).read_bytes()
    for damaged in (data[: len(data) // 2], b"\0" * 64, b""):
        (run / CHECKPOINT).write_bytes(damaged)
        with pytest.raises(CheckpointError) as exc:
            load_checkpoint(run, cfg)
        msg = str(exc.value)
        assert msg.startswith(f"cannot use checkpoint {run / CHECKPOINT}: ")
        assert "truncated or corrupted" in msg or "damaged" in msg
        assert f"mv {run / PREVIOUS} {run / CHECKPOINT}" in msg and "\n" not in msg
    assert read_checkpoint(run / PREVIOUS)["step"] == 1  # the fallback is intact
    assert {p.name for p in run.iterdir()} == {CHECKPOINT, PREVIOUS}  # no temporaries


def test_checkpoint_of_other_data_is_refused(tmp_path):
    torch.save({"weights": torch.ones(2)}, tmp_path / CHECKPOINT)
    with pytest.raises(CheckpointError, match="not a tailtheory checkpoint"):
        read_checkpoint(tmp_path / CHECKPOINT)


# --- metrics.jsonl -----------------------------------------------------------------------------

def _write_metrics(run: Path, steps, torn: str = "") -> None:
    run.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"step": s, "x": s / 3}, sort_keys=True) + "\n" for s in steps)
    (run / METRICS).write_text(lines + torn)


def test_torn_last_line_is_dropped_with_a_note(tmp_path):
    _write_metrics(tmp_path, range(4), torn='{"step": 4, "x": 1.3')
    assert [m["step"] for m in read_metrics(tmp_path)] == [0, 1, 2, 3]
    note = truncate_metrics(tmp_path, 2)
    assert "dropped 2 line(s) past the checkpoint's step 2" in note and "torn" in note
    assert [m["step"] for m in read_metrics(tmp_path)] == [0, 1]
    assert (tmp_path / METRICS).read_text().endswith("}\n")
    assert truncate_metrics(tmp_path, 2) is None  # nothing more to drop: no note


def test_corrupted_middle_line_is_an_error(tmp_path):
    _write_metrics(tmp_path, range(2))
    with open(tmp_path / METRICS, "a") as f:
        f.write("not json\n" + json.dumps({"step": 2}) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 3 is not JSON"):
        truncate_metrics(tmp_path, 2)


def test_resume_after_a_torn_metrics_line_matches_a_straight_run(tmp_path, capsys):
    """Killed mid-append after step 2 (checkpoint at 2): ``--resume`` drops the torn line, says
    so, and writes exactly the lines of an uninterrupted run."""
    straight = TrainConfig(**SMALL, steps=3, checkpoint_every=2, out=str(tmp_path / "straight"))
    train(straight, progress=False, task=DenseKK())
    cut = TrainConfig(**SMALL, steps=2, checkpoint_every=2, out=str(tmp_path / "cut"))
    train(cut, progress=False, task=DenseKK())
    with open(Path(cut.out) / METRICS, "a") as f:
        f.write('{"step": 2, "reward/me')
    train(TrainConfig(**SMALL, steps=3, checkpoint_every=2, out=cut.out), resume=True,
          progress=False, task=DenseKK())
    assert "torn by an interrupted write" in capsys.readouterr().err
    assert no_time(read_metrics(cut.out)) == no_time(read_metrics(straight.out))


# --- holes in metrics.jsonl: refused, never resumed over or read as a curve ---------------------

def test_read_metrics_refuses_a_file_with_holes_naming_the_gap(tmp_path):
    _write_metrics(tmp_path, [*range(19), 20, 21])
    with pytest.raises(MetricsGapError,
                       match=r"step\(s\) 19 missing \(the lines hold 0-18, 20-21\)"):
        read_metrics(tmp_path)
    _write_metrics(tmp_path, [0, 1, 1, 2])
    with pytest.raises(MetricsGapError, match="repeated or out of order"):
        read_metrics(tmp_path)


def test_plot_refuses_a_run_with_holes(tmp_path, capsys):
    run = tmp_path / "run"
    _write_metrics(run, [*range(7), 20, 21])
    (run / "config.json").write_text(json.dumps({"seed": 0, "method": "grpo"}))
    assert main(["plot", str(run), "--out", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "step(s) 7-19 missing" in err and "Traceback" not in err
    assert not (tmp_path / "p.png").exists()


RUN_ARGS = ["train", "--model", "tiny", "--task", "kk", "--n-people", "2", "--prompts-per-step",
            "2", "--group-size", "2", "--checkpoint-every", "1", "--quiet"]


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A run of 3 steps checkpointed after every step (``checkpoint.pt`` at 3, the previous at 2)
    and its lines."""
    run = tmp_path_factory.mktemp("straight") / "run"
    assert main([*RUN_ARGS, "--steps", "3", "--out", str(run)]) == 0
    return run, read_metrics(run)


def _copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    (dst / ".tailtheory-lock").unlink(missing_ok=True)
    return dst


@pytest.mark.parametrize("damage", ["lost", "torn"])
def test_resume_over_a_gap_before_the_checkpoint_is_refused(damage, three_steps, tmp_path,
                                                            capsys):
    """Lines lost (or torn) before the checkpoint's step cannot be made again from it: one line
    naming the gap and the way out, the file unchanged, no step run."""
    run = _copy_run(three_steps[0], tmp_path / "run")
    (run / PREVIOUS).unlink()                       # only the step-3 checkpoint: train from 0
    lines = (run / METRICS).read_text().splitlines()
    kept = [lines[0], lines[2]] if damage == "lost" else [lines[0], lines[1][:20]]
    (run / METRICS).write_text("\n".join(kept) + ("\n" if damage == "lost" else ""))
    before = (run / METRICS).read_bytes()
    capsys.readouterr()
    assert main([*RUN_ARGS, "--steps", "4", "--out", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    gap = "step(s) 1 missing" if damage == "lost" else "step(s) 1-2 missing"
    assert gap in err and "before the checkpoint's step 3" in err
    assert f"rm {run / CHECKPOINT}" in err and "--resume" in err
    assert (run / METRICS).read_bytes() == before and not (run / PREVIOUS).exists()


def test_a_gap_after_the_previous_checkpoint_is_rerun_from_it(three_steps, tmp_path, capsys):
    """Step 2's line lost, the previous checkpoint at step 2: the error says to resume from it,
    and doing so runs step 2 again, giving the lines of the uninterrupted run."""
    run = _copy_run(three_steps[0], tmp_path / "run")
    lines = (run / METRICS).read_text().splitlines()
    (run / METRICS).write_text("\n".join(lines[:2]) + "\n")
    argv = [*RUN_ARGS, "--steps", "3", "--out", str(run), "--resume"]
    assert main(argv) == 2
    assert "previous checkpoint (step 2) precedes the gap" in capsys.readouterr().err
    os.replace(run / PREVIOUS, run / CHECKPOINT)      # the command the error gives
    assert main(argv) == 0
    assert no_time(read_metrics(run)) == no_time(three_steps[1])
