"""A user's checkpoint warm-started on a task (``tailtheory/engine/start/sft_model.py``): through
its own tokenizer and chat template (Qwen3's with thinking off, recorded), always a folder that
``train --model`` takes, never over a folder it did not make.

Checkpoints: ``tests/checkpoints.family_checkpoint`` (random tiny Qwen3 with a byte-level BPE and
a ChatML template with the thinking switch). Random weights never reach a window in a few steps,
so the window's side of the record is checked with the accuracy scripted.
"""

from __future__ import annotations

import json

import pytest

from tailtheory.cli import main
from tailtheory.core.models import checkpoint_fingerprint
from tailtheory.engine.start import sft
from tailtheory.engine.start.sft_model import MADE_BY, ModelSFTConfig, check_out, sft_model
from tailtheory.engine.start.warm_cache import load_warm_start
from tailtheory.engine.tasks.chat import THINKING_OFF
from tests.checkpoints import family_checkpoint

SMALL = dict(task="kk", task_kwargs={"n_people": 2}, lr=1e-3, batch_size=4, max_steps=2,
             eval_every=1, eval_n=8, pool_size=32)
"""Two steps on a pool of 32 problems: the pipeline, in seconds."""


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return family_checkpoint(tmp_path_factory.mktemp("qwen3") / "model", "qwen3")


def test_out_folder_rules(tmp_path, qwen3):
    check_out(tmp_path / "new", qwen3)                            # new: fine
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty", qwen3)                          # empty: fine
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sft.json").write_text(json.dumps({"made_by": MADE_BY}))
    check_out(mine, qwen3)                                        # an earlier run's: replaced
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    (tmp_path / "file").write_text("x")
    for out, match in ((tmp_path / "notes", "did not write"), (tmp_path / "file", "is a file"),
                       (qwen3, "the model's own folder")):
        with pytest.raises(ValueError, match=match):
            check_out(out, qwen3)


def test_a_chat_checkpoint_is_warm_started_into_a_folder_train_takes(tmp_path, qwen3):
    out = tmp_path / "warm"
    path, rec = sft_model(ModelSFTConfig(model=str(qwen3), out=str(out), **SMALL), progress=False)
    assert path == out and json.loads((out / "sft.json").read_text())["made_by"] == MADE_BY
    assert rec["chat_kwargs"] == THINKING_OFF and rec["steps"] == 2
    assert rec["source"]["fingerprint"] == checkpoint_fingerprint(qwen3)
    assert checkpoint_fingerprint(out) != checkpoint_fingerprint(qwen3)     # it trained
    assert 0.0 <= rec["accuracy"] <= 1.0 and rec["in_window"] == (
        rec["window"][0] <= rec["accuracy"] <= rec["window"][1])
    model, task = load_warm_start(out)                           # the folder speaks the task
    assert task.chat_kwargs == THINKING_OFF and task.stop_ids == tuple(rec["stop_ids"])
    prompt = task.decode(task.problems(1)[0].prompt_ids)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")   # thinking off
    sft_model(ModelSFTConfig(model=str(qwen3), out=str(out), **SMALL), progress=False)  # ours
    assert main(["train", "--model", str(out), "--task", "kk", "--n-people", "2",
                 "--prompts-per-step", "2", "--group-size", "2", "--steps", "1",
                 "--rollout-backend", "hf", "--device", "cpu", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0


def test_window_and_exit_status(tmp_path, qwen3, monkeypatch, capsys):
    """Inside the window: stop there, exit 0 and the next command; outside: the folder is still
    written, exit 1 and what to do."""
    flags = ["sft", "--model", str(qwen3), "--task", "kk", "--n-people", "2", "--steps", "2",
             "--eval-every", "1", "--lr", "1e-3", "--batch-size", "4", "--pool-size", "32",
             "--quiet"]
    monkeypatch.setattr(sft, "sampled_accuracy", lambda *a, **k: 0.5)
    assert main([*flags, "--out", str(tmp_path / "in")]) == 0
    assert f"next: tailtheory train --model {tmp_path / 'in'}" in capsys.readouterr().out
    assert json.loads((tmp_path / "in" / "sft.json").read_text())["stop"] == "window"
    monkeypatch.setattr(sft, "sampled_accuracy", lambda *a, **k: 0.0)
    assert main([*flags, "--out", str(tmp_path / "out")]) == 1
    assert "missed its window" in capsys.readouterr().err
    assert (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.parametrize("argv, match", [
    (["--model", "M"], "needs --out DIR"),
    (["--out", "D"], "go with --model PATH"),
    (["--lr", "1e-4"], "go with --model PATH")])
def test_flags_that_need_each_other(argv, match, capsys):
    assert main(["sft", *argv, "--quiet"]) == 2
    assert match in capsys.readouterr().err


def test_a_foreign_out_is_refused_untouched(tmp_path, qwen3, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "todo.txt").write_text("mine")
    assert main(["sft", "--model", str(qwen3), "--out", str(out), "--quiet"]) == 2
    assert "did not write" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["todo.txt"]
