"""``tailtheory probe decisiveness`` (``tailtheory/probe/decisive.py``): its config's checks, and
the probe end to end on a checkpoint folder the test writes, through the command line."""

from __future__ import annotations

import json

import pytest

from tailtheory.cli import main
from tailtheory.probe.decisive import DecisiveConfig


@pytest.mark.parametrize("kw, message", [
    ({}, "give --model PATH"),
    ({"model": "m", "recipe": "learn"}, "one of them"),
    ({"recipe": "nope"}, "unknown recipe 'nope'; valid recipes"),
    ({"recipe": "learn", "policy": "late"}, "unknown policy"),
    ({"model": "m", "task": "sudoku"}, "unknown task"),
    ({"model": "m", "K": 1}, "--K"),
    ({"model": "m", "sampler": "gumbel"}, "unknown sampler 'gumbel'; valid: coupled"),
])
def test_bad_config_is_one_clear_error(kw, message):
    with pytest.raises(ValueError, match=message):
        DecisiveConfig(**kw)


def test_defaults_are_the_calibrated_tau_and_k():
    from tailtheory.lopti.decisive import calibration as cal

    c = DecisiveConfig(model="m")
    assert (c.K, c.tau) == (cal.K, cal.TAU)


def test_probe_a_checkpoint_folder_end_to_end(tmp_path, capsys, monkeypatch):
    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.tasks.task import get_task

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = get_task("kk", n_people=2)
    folder = tmp_path / "ckpt"
    model = tiny_lm(vocab_size=task.vocab_size, seed=0)
    model.save_pretrained(folder)
    task.tokenizer.save_pretrained(folder)
    out = tmp_path / "probe"
    assert main(["probe", "decisiveness", "--model", str(folder), "--task", "kk",
                 "--n-people", "2", "--K", "2", "--prompts", "1", "--others", "2",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "decisiveness probe of" in printed and "decisive_share" in printed
    # the noise shown: one prompt's tokens are below the reporting floor
    assert "coupled branches" in printed and "excess mean D" in printed
    assert printed.count("not reportable") == 2 and "(floor: 200 tokens of 40 prompts)" in printed
    rec = json.loads((out / "probe_decisiveness.json").read_text())
    assert rec["config"]["K"] == 2 and set(rec["files"]) >= {"decisive_tokens.csv",
                                                             "decisive_split.png",
                                                             "decisive_noise.csv"}
    noise = rec["result"]["noise"]
    assert noise["prompts"] == 1 and not noise["share"]["reportable"]
    assert sum(sum(c.values()) for c in noise["calls"].values()) == noise["tokens"]
    # the folder is the probe's now: a second run replaces its own files
    assert main(["probe", "decisiveness", "--model", str(folder), "--task", "kk",
                 "--n-people", "2", "--K", "2", "--prompts", "1", "--others", "2",
                 "--out", str(out)]) == 0
