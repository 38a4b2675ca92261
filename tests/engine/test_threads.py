"""CPU threads of a training command (``tailtheory.engine.threads``): one for a small model on
the CPU unless told otherwise, and the caller's count back after a block."""

import pytest
import torch

from tailtheory.engine import threads as th


def test_small_models_on_the_cpu_get_one_thread():
    assert th.default_threads(723_072) == 1
    assert th.default_threads(th.SMALL_MODEL_PARAMS + 1) == th.TORCH_DEFAULT
    assert th.default_threads(1000, "cuda") == th.TORCH_DEFAULT


def test_a_positive_count_wins_and_zero_is_automatic():
    assert th.resolve_threads(3, 1000) == 3
    assert th.resolve_threads(0, 1000) == 1
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads must be an integer >= 0"):
            th.check_threads(bad)


def test_torch_threads_restores_the_count_even_on_error():
    before = torch.get_num_threads()
    with th.torch_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), th.torch_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_model_threads_picks_one_for_a_small_cpu_model_and_restores():
    before = torch.get_num_threads()
    small = torch.nn.Linear(8, 8)
    with th.model_threads(small) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with th.model_threads(small, threads=2) as n:
        assert n == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == before


def test_model_threads_keeps_torch_default_for_a_large_model():
    large = torch.nn.Linear(4000, 2600, device="meta")  # 10.4M parameters, no memory
    assert sum(p.numel() for p in large.parameters()) > th.SMALL_MODEL_PARAMS
    with th.model_threads(large) as n:
        assert n == th.TORCH_DEFAULT


def test_pinned_threads_wins_over_the_automatic_choice_inside_it():
    large = torch.nn.Linear(4000, 2600, device="meta")  # above SMALL_MODEL_PARAMS
    before = torch.get_num_threads()
    with th.pinned_threads(1):
        with th.model_threads(large) as n:
            assert n == 1 and torch.get_num_threads() == 1
        assert th.resolve_threads(0, 10**9) == 1
        assert th.resolve_threads(3, 10**9) == 3  # an explicit count still wins
    assert torch.get_num_threads() == before
    assert th.resolve_threads(0, 10**9) == th.TORCH_DEFAULT
    with pytest.raises(RuntimeError), th.pinned_threads(1):
        raise RuntimeError("inside")
    assert th.resolve_threads(0, 10**9) == th.TORCH_DEFAULT
    with pytest.raises(ValueError, match=">= 1"), th.pinned_threads(0):
        pass
