"""Response lengths (tailtheory.engine.tasks.lengths): the statistics against a sorted-list reference,
and sampled lengths against the rollout's own EOS bookkeeping."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tailtheory.core.models import tiny_lm
from tailtheory.engine.tasks.lengths import (length_stats, response_length_stats, sampled_lengths,
                                       target_lengths)
from tailtheory.engine.tasks.task import get_task


def _quantile_ref(xs: list[int], q: float) -> float:
    """Linear interpolation between order statistics ``x_(floor(h))`` and ``x_(ceil(h))``,
    ``h = q (n - 1)`` (0-based)."""
    xs = sorted(xs)
    h = q * (len(xs) - 1)
    lo = int(h)
    return xs[lo] + (h - lo) * (xs[min(lo + 1, len(xs) - 1)] - xs[lo])


@given(st.lists(st.integers(0, 300), min_size=1, max_size=50))
def test_length_stats_match_the_sorted_reference(xs):
    s = length_stats(xs)
    assert s.n == len(xs) and s.max == max(xs) and s.ended == 1.0
    assert s.median == pytest.approx(_quantile_ref(xs, 0.5))
    assert s.p90 == pytest.approx(_quantile_ref(xs, 0.9))
    assert s.mean == pytest.approx(sum(xs) / len(xs))


def test_length_stats_by_hand():
    s = length_stats([4, 1, 3, 2], ended=[True, False, True, True])
    assert (s.median, s.max, s.mean, s.ended) == (2.5, 4, 2.5, 0.75)
    assert s.p90 == pytest.approx(3.7)


@pytest.mark.parametrize("xs, ended, match", [
    ([], None, "non-empty"), ([1, -2], None, "non-negative"), ([1.5], None, "integers"),
    ([1, 2], [True], "shape")])
def test_length_stats_bad_input(xs, ended, match):
    with pytest.raises(ValueError, match=match):
        length_stats(xs, ended)


def test_target_lengths_count_eos():
    task = get_task("kk", n_people=3)
    assert target_lengths(task, task.problems(5, seed=0)) == [4] * 5


@pytest.fixture(scope="module")
def kkt_model():
    task = get_task("kk_trace")
    return tiny_lm(vocab_size=task.vocab_size, hidden=32, layers=1, heads=2, kv_heads=1,
                   seed=0), task


def test_sampled_lengths_agree_with_the_responses(kkt_model):
    """A random model rarely stops: lengths are the cap or the position of its first EOS."""
    model, task = kkt_model
    problems = task.problems(8, seed=0)
    lengths, ended = sampled_lengths(model, task, problems, seed=3, max_new_tokens=12)
    assert len(lengths) == len(ended) == 8 and all(1 <= n <= 12 for n in lengths)
    assert all(e or n == 12 for n, e in zip(lengths, ended))
    again = sampled_lengths(model, task, problems, seed=3, max_new_tokens=12)
    assert (lengths, ended) == again


def test_response_length_stats_is_seeded(kkt_model):
    """The same problems and samples for the same seed; lengths never exceed the task's cap."""
    model, task = kkt_model
    a, b = (response_length_stats(model, task, n=4, seed=1) for _ in range(2))
    assert a == b and a.n == 4 and a.max <= task.max_response_len
