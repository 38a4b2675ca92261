"""Tests of ``tailtheory.engine.start.pretrain``: the schedule and the held-out windows (the loop
itself is tested through ``corpus_lm`` and ``resume``)."""

import math

import pytest
import torch

from tailtheory.engine.start.corpus_lm import CorpusLMConfig
from tailtheory.engine.start.pretrain import lr_factor, windows


def test_lr_factor_warms_up_then_decays_to_a_tenth():
    cfg = CorpusLMConfig(steps=100, warmup=10)
    f = lr_factor(cfg)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(100) == pytest.approx(0.1)
    assert f(55) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f(1000) == pytest.approx(0.1)
    assert all(f(s) >= f(s + 1) for s in range(10, 100))


def test_windows_cut_in_order_and_refuse_too_little_text():
    s = torch.arange(10)
    assert torch.equal(windows(s, 3), torch.arange(9).view(3, 3))
    assert torch.equal(windows(s, 3, 2), torch.arange(6).view(2, 3))
    with pytest.raises(ValueError, match="fewer than"):
        windows(s, 3, 4)
    with pytest.raises(ValueError, match="fewer than"):
        windows(s, 11)
