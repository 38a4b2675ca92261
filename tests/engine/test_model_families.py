"""The checkpoints users train, end to end: tiny Qwen3, Llama 3.x (llama3 rope, two EOS ids in
its generation config, turns ending with ``<|eot_id|>``) and a SentencePiece-tokenized Llama,
each built here from its ``transformers`` config (``tests/checkpoints.family_checkpoint``), run
``sft --model``, ``train --model`` on the ``fast`` engine on every rollout path, and ``probe``.

The engine's logits against each family's own forward: ``tests/engine/rollout/test_families.py``.
"""

from __future__ import annotations

import json

import pytest

from tailtheory.cli import main
from tailtheory.core.models import load_tokenizer
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rollout.engine import PATHS
from tailtheory.engine.load import load_start
from tailtheory.engine.start.sft_model import ModelSFTConfig, sft_model
from tests.checkpoints import family_checkpoint

FAMILIES = ("qwen3", "llama3", "sentencepiece")
SMALL = dict(task="kk", task_kwargs={"n_people": 2}, lr=1e-3, batch_size=4, max_steps=2,
             eval_every=1, eval_n=8, pool_size=32)
RUN = ["--task", "kk", "--n-people", "2", "--prompts-per-step", "2", "--group-size", "2",
       "--steps", "1", "--device", "cpu", "--quiet"]


_WARM: dict = {}


def _warm(family: str, tmp_path_factory):
    """The family's checkpoint after two SFT steps (built once a session)."""
    if family not in _WARM:
        root = tmp_path_factory.mktemp(family)
        source = family_checkpoint(root / "model", family)
        _WARM[family], _ = sft_model(ModelSFTConfig(model=str(source), out=str(root / "warm"),
                                                    **SMALL), progress=False)
    return _WARM[family]


@pytest.fixture(scope="module", params=FAMILIES)
def warm(request, tmp_path_factory):
    """``(family, warm-started folder)``."""
    return request.param, _warm(request.param, tmp_path_factory)


def test_sft_writes_what_the_family_needs(warm):
    family, out = warm
    rec = json.loads((out / "sft.json").read_text())
    tok = load_tokenizer(out)
    ids = tok.convert_tokens_to_ids
    expected = {"qwen3": [ids("<|im_end|>")],
                "llama3": [ids("<|eot_id|>"), ids("<|end_of_text|>")],   # turn end, EOS, config
                "sentencepiece": [tok.eos_token_id]}[family]
    assert rec["stop_ids"] == expected
    assert rec["chat_kwargs"] == ({"enable_thinking": False} if family == "qwen3" else {})
    if family == "llama3":
        gen = json.loads((out / "generation_config.json").read_text())
        assert gen["eos_token_id"] == [ids("<|end_of_text|>"), ids("<|eot_id|>")]


@pytest.mark.parametrize("path", PATHS)
def test_train_on_the_fast_engine(warm, path, tmp_path):
    family, out = warm
    _, task = load_start(TrainConfig(task="kk", n_people=2, model=str(out)))
    noise = ["--rollout-noise", "0.05"] if "noise" in path else []
    assert main(["train", "--model", str(out), *RUN, "--rollout", path, *noise,
                 "--out", str(tmp_path / "run")]) == 0, (family, path)
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert line["step"] in (0, 1)
    assert 0 < line["rollout/len_mean"] <= task.max_response_len


@pytest.mark.parametrize("family", [f if f == "qwen3" else pytest.param(f, marks=pytest.mark.slow)
                                    for f in FAMILIES])
def test_probe(family, tmp_path, tmp_path_factory):
    """The text probes read windows through each family's tokenizer (Qwen3's in ``make test``,
    the others under ``make test-thorough``)."""
    out = _warm(family, tmp_path_factory)
    assert main(["probe", "mismatch", "--model", str(out), "--device", "cpu", "--batch", "2",
                 "--length", "16", "--out", str(tmp_path / "probe")]) == 0
