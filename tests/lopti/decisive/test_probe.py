"""The stratified decisiveness probe of ``tailtheory/lopti/decisive/probe.py``: token-to-word
maps for word-level and BPE tokenizers, token roles, the stratified sample's weights, and one
probed batch end to end on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tailtheory.engine.config import TrainConfig
from tailtheory.engine.load import load_model
from tailtheory.engine.tasks.task import get_task
from tailtheory.lopti.decisive import probe as dp


def test_token_words_of_the_word_level_tokenizer():
    task = get_task("kk_trace", n_people=2)
    ids = task.encode(" try T T : P0")
    assert dp.token_words(task, ids) == [0, 1, 2, 3, 4]


class _Pieces:
    """A stand-in tokenizer whose ids decode to given pieces (BPE-like word splits)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


@pytest.mark.parametrize("pieces, words", [
    ([" cons", "istent", " T"], [0, 0, 1]),
    ([" ", "try", " T", " ", ":"], [0, 0, 1, 2, 2]),
    (["try", " T", "T"], [0, 1, 1]),
])
def test_token_words_of_split_words(pieces, words):
    assert dp.token_words(_Pieces(pieces), list(range(len(pieces)))) == words


def test_token_roles_of_kk_and_other_tasks():
    task = get_task("kk", n_people=3)
    ids = task.encode(" T F T") + [task.eos_id]
    assert dp.token_roles(task, ids) == ["fork", "fork", "fork", "scaffold"]
    assert dp.token_roles(get_task("chain_sum"), [1, 2]) is None
    trace = get_task("kk_trace", n_people=2)
    p = trace.problems(1, seed=4)[0]
    roles = dp.token_roles(trace, trace.target_ids(p))
    assert roles[-1] == "scaffold" and "fork" in roles and "off_path" not in roles


def test_probe_positions_take_every_lowest_bin_token_and_weight_the_rest():
    pi = torch.tensor([[0.1, 0.9, 0.6, 0.2], [0.3, 0.95, 0.05, 0.99]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    pos, w = dp.probe_positions(pi, mask, 2, torch.Generator().manual_seed(0))
    assert pos[:3] == [(0, 0), (0, 3), (1, 2)] and list(w[:3]) == [1, 1, 1]
    assert len(pos) == 5 and all(pi[r, t] > 0.25 and mask[r, t] for r, t in pos[3:])
    assert w[3:] == pytest.approx([2.0, 2.0])       # 4 tokens above the bin, 2 drawn
    pos, w = dp.probe_positions(pi, mask, 10, torch.Generator().manual_seed(0))
    assert len(pos) == 7 and np.allclose(w, 1)      # fewer than asked for: all, weight 1


def test_measure_decisiveness_end_to_end_on_a_tiny_model():
    cfg = TrainConfig(task="kk", model="tiny", n_people=2, prompts_per_step=2, group_size=3,
                      method="grpo")
    task = get_task("kk", n_people=2)
    model = load_model(cfg, task)
    data = dp.measure_decisiveness(model, task, cfg, seeds=(0,), K=4, others=3, prompts=1,
                                   progress=False)
    batch = data["batches"][0]
    assert batch["responses"] == 3 and data["K"] == 4
    counted = sum(batch["count"])
    assert counted == sum(sum(v) for v in batch["count_role"].values())
    low = [t for t in data["tokens"] if t["bin"] == 0]
    assert len(low) == batch["count"][0]                 # every lowest-bin token is probed
    for t in data["tokens"]:
        assert 0 <= t["D"] <= 1 and t["D"] <= (1 - t["p"]) + 1e-6 and t["role"] is not None
    again = dp.measure_decisiveness(model, task, cfg, seeds=(0,), K=4, others=3, prompts=1,
                                    progress=False)
    assert again == data                                 # seeded throughout


def test_split_norms_add_up_where_every_token_is_probed():
    from tests.lopti.test_measurement import DenseKK  # a reward that differs between responses

    cfg = TrainConfig(task="kk", model="tiny", n_people=2, prompts_per_step=2, group_size=3,
                      method="grpo")
    task = DenseKK()
    model = load_model(cfg, task)
    data = dp.measure_decisiveness(model, task, cfg, seeds=(0,), K=3, others=100, prompts=2,
                                   tau=0.0, progress=False)
    norms = data["batches"][0]["norms"]
    assert sum(norms["bin"]) > 0                         # the rewards differ: a real gradient
    # every token probed with weight 1 and tau 0 calls every token decisive: the decisive
    # part of each bin is the whole bin, the free part empty
    assert norms["decisive"] == pytest.approx(norms["bin"], rel=1e-5, abs=1e-12)
    assert norms["free"] == [0.0] * 4
