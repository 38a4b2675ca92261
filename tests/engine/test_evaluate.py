"""Held-out accuracy during RL (``tailtheory.engine.evaluate``)."""

import torch

from tailtheory.core.models import tiny_lm
from tailtheory.engine.evaluate import EVAL_SEED, _held_out, held_out_accuracy
from tailtheory.engine.tasks.task import get_task


def test_held_out_accuracy_is_deterministic_and_in_range():
    torch.manual_seed(0)
    model = tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1)
    task = get_task("kk", seed=0, n_people=2)
    a = held_out_accuracy(model, task, n=4, temperature=1.0, seed=7, backend="hf")
    assert 0.0 <= a <= 1.0
    assert held_out_accuracy(model, task, n=4, temperature=1.0, seed=7, backend="hf") == a


def test_held_out_problems_are_the_warm_starts_and_the_mode_is_restored():
    task = get_task("kk", seed=0, n_people=2)
    assert list(_held_out(task, 3)) == task.problems(3, seed=EVAL_SEED)
    model = tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1).train()
    held_out_accuracy(model, task, n=2, temperature=1.0, seed=0, backend="hf")
    assert model.training                        # evaluated in eval mode, handed back training
