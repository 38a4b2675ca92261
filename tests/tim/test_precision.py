"""FP16 against BF16 (``tailtheory/tim/precision.py``, claim V7): the scorers see the same tokens,
the ratio's bootstrap interval behaves as a ratio of means over responses, and a rung that is not
built here is refused naming its build (nothing trained)."""

from __future__ import annotations

import math

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.engine.tasks.task import get_task
from tailtheory.tim.precision import (DTYPES, PREDICTED_RATIO, SETTINGS, precision_mismatch,
                                      ratio_interval)


def test_the_prediction():
    assert PREDICTED_RATIO == (2.0 ** -8 / 2.0 ** -11) ** 2


def test_ratio_interval_by_hand():
    mask = torch.ones(4, 3)
    den = torch.rand(4, 3, generator=torch.Generator().manual_seed(0)) + 0.1
    ratio, low, high = ratio_interval(5 * den, den, mask)        # every response: ratio 5
    assert (ratio, low, high) == (pytest.approx(5), pytest.approx(5), pytest.approx(5))
    num = den.clone()
    num[0] *= 100                                                 # one heavy response
    ratio, low, high = ratio_interval(num, den, mask, n_boot=500)
    assert low < ratio < high and low >= 1 - 1e-9
    m = mask.clone()
    m[0] = 0                                                      # masked away: ratio 1
    assert ratio_interval(num, den, m)[0] == pytest.approx(1.0)
    zero = den.clone()
    zero[1:] = 0                         # only response 0 has a denominator: resamples lack it
    ratio, low, high = ratio_interval(num, zero, mask)
    assert ratio == pytest.approx(float((num * mask).sum() / (zero * mask).sum()))
    assert math.isnan(low) and math.isnan(high)


def test_one_step_numbers_on_a_tiny_model():
    model = tiny_lm(vocab_size=512, hidden=32, layers=1, heads=2, kv_heads=1, seed=0)
    task = get_task("kk", n_people=2)
    out = precision_mismatch(model, task, n_prompts=6)
    assert out["responses"] == 6 and out["tokens"] > 0
    for setting in SETTINGS:
        x = out["settings"][setting]
        assert set(x["k3"]) == set(DTYPES) and all(v >= 0 for v in x["k3"].values())
        assert sum(x["tokens_by_bin"]) == out["tokens"]
        if x["k3"]["fp16"] == 0:        # a tiny model's two forwards may agree bitwise
            assert math.isnan(x["ratio"])
        elif math.isnan(x["low"]):      # ... on some responses: a resample of only those has
            assert math.isnan(x["high"]) and x["ratio"] >= 0         # no denominator
        else:
            assert x["low"] <= x["ratio"] <= x["high"]
