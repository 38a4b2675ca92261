"""Batch-shape mismatch (``tailtheory/mismatch/batch_shape.py``, claim V8): the measures from
``Delta``, the per-sequence log-probs at any batch size, and the rows of the comparison. Across
batch shapes the comparisons use an absolute floor, never bitwise equality (kernels may block
other shapes otherwise on another CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.mismatch.batch_shape import (RATIO_BAND, batch_shape_mismatch, ragged_windows,
                                             shape_logprobs, shape_stats)

FLOAT32_FLOOR = 1e-4
"""|Delta| of a float32 log-prob between two batch shapes: reduction order only."""


@pytest.fixture(scope="module")
def model():
    return tiny_lm(vocab_size=64, hidden=32, layers=2, heads=2, kv_heads=1, seed=1)


@pytest.fixture(scope="module")
def seqs():
    stream = torch.randint(2, 64, (400,), generator=torch.Generator().manual_seed(0))
    return ragged_windows(stream, 10, 4, 20, seed=3)


def test_shape_stats_by_hand():
    d = torch.tensor([0.0, 0.0, 2e-3, -5e-4, math.log(1.2), math.log(0.85)])
    s = shape_stats(d)
    assert s["tokens"] == 6 and s["equal"] == pytest.approx(2 / 6)
    assert s["over_1e3"] == pytest.approx(3 / 6) and s["outside"] == pytest.approx(2 / 6)
    assert s["max_abs"] == pytest.approx(math.log(1.2))
    assert s["k3"] == pytest.approx(float((d.double().exp() - 1 - d.double()).mean()))
    assert RATIO_BAND == (0.9, 1.1)


def test_scores_are_per_sequence_log_probs(model, seqs):
    lp = shape_logprobs(model, seqs, 1)
    assert [len(x) for x in lp] == [len(s) - 1 for s in seqs]
    assert all((x <= 0).all() for x in lp)
    z = torch.log_softmax(model(torch.tensor([seqs[0]])).logits[0].float(), -1)
    want = z[torch.arange(len(seqs[0]) - 1), torch.tensor(seqs[0][1:])]
    assert (lp[0] - want).abs().max() < FLOAT32_FLOOR
    again = shape_logprobs(model, seqs, 1)             # same call, same shapes: the same
    assert all(torch.equal(a, b) for a, b in zip(lp, again))


@pytest.mark.parametrize("decoder", ["hf", "fast"])
def test_padded_batches_agree_in_float32_within_rounding(model, seqs, decoder):
    alone = torch.cat(shape_logprobs(model, seqs, 1, "float32", decoder))
    batched = torch.cat(shape_logprobs(model, seqs, 4, "float32", decoder))
    assert (alone - batched).abs().max() < FLOAT32_FLOOR


def test_rows(model, seqs):
    rows = batch_shape_mismatch(model, seqs, batches=(1, 4), dtypes=("float32", "bf16"))
    assert [(r["decoder"], r["dtype"], r["batch"]) for r in rows] == [
        ("hf", "float32", 4), ("hf", "bf16", 4), ("fast", "float32", 4), ("fast", "bf16", 4)]
    n = sum(len(s) - 1 for s in seqs)
    assert all(r["tokens"] == n and 0 <= r["outside"] <= r["over_1e3"] + 1e-12 <= 1 + 1e-12
               for r in rows)
    assert all(r["max_abs"] < FLOAT32_FLOOR and r["outside"] == 0 for r in rows
               if r["dtype"] == "float32")


@pytest.mark.parametrize("kw, match", [
    (dict(batch=0), "batch must be"), (dict(dtype="fp8"), "dtype must be one of"),
    (dict(decoder="vllm"), "decoder one of")])
def test_bad_input(model, seqs, kw, match):
    with pytest.raises(ValueError, match=match):
        shape_logprobs(model, seqs, **{"batch": 2, **kw})
    with pytest.raises(ValueError, match="at least 2 tokens"):
        shape_logprobs(model, [[5]], 1)


def test_ragged_windows():
    stream = torch.arange(100)
    w = ragged_windows(stream, 8, 5, 9, seed=1)
    assert len(w) == 8 and all(5 <= len(x) <= 9 for x in w)
    assert all(x == list(range(x[0], x[0] + len(x))) for x in w)        # contiguous windows
    assert w == ragged_windows(stream, 8, 5, 9, seed=1)
    with pytest.raises(ValueError, match="min_len <= max_len"):
        ragged_windows(stream, 8, 9, 5)
