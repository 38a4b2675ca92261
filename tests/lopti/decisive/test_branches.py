"""The branch estimator of ``tailtheory/lopti/decisive/branches.py``: common random numbers seeded per
token, chunking, the decoders it picks, and its errors (its agreement with exact values:
``tests/lopti/decisive/test_scripted.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rollout.fast import InferenceEngine
from tailtheory.engine.load import load_model
from tailtheory.engine.tasks.task import get_task
from tailtheory.lopti.decisive.branches import branch_values, decoder_of
from tests.lopti.decisive.scripted import ScriptedPolicy


@pytest.fixture(scope="module")
def setup():
    task = get_task("kk", n_people=3)
    problems = task.problems(4, seed=3)
    policy = ScriptedPolicy(task, problems, 0.3)
    responses = [policy.answers[tuple(p.prompt_ids)] + [task.eos_id] for p in problems]
    return task, problems, policy, responses


def test_common_random_numbers_pair_the_branches(setup):
    task, problems, policy, responses = setup
    pos = [(0, 0), (2, 1)]
    a = branch_values(policy, task, problems, responses, pos, K=40, cap=5, seed=5)
    b = branch_values(policy, task, problems, responses, list(reversed(pos)), K=40, cap=5, seed=5)
    # seeded per token, not by stream order: a token's rollouts do not depend on its neighbours
    assert np.array_equal(a["rewards_with"][0], b["rewards_with"][1])
    assert np.array_equal(a["rewards_without"][1], b["rewards_without"][0])
    # the branches share the uniforms: with the same law after the branch token they match
    again = branch_values(policy, task, problems, responses, pos, K=40, cap=5, seed=6)
    assert not np.array_equal(a["rewards_with"], again["rewards_with"])  # the seed matters


def test_bad_positions_and_sizes_are_errors(setup):
    task, problems, policy, responses = setup
    with pytest.raises(ValueError, match="not a token of the responses"):
        branch_values(policy, task, problems, responses, [(0, 9)], K=4, cap=5)
    with pytest.raises(ValueError, match="at or past the cap"):
        branch_values(policy, task, problems, responses, [(0, 3)], K=4, cap=3)
    with pytest.raises(ValueError, match="K"):
        branch_values(policy, task, problems, responses, [(0, 0)], K=1, cap=5)
    with pytest.raises(ValueError, match="problems for"):
        branch_values(policy, task, problems[:2], responses, [(0, 0)], K=4, cap=5)
    with pytest.raises(ValueError, match="eps"):
        ScriptedPolicy(task, problems, 1.5)


def test_chunks_do_not_change_a_scripted_policy_s_estimates(setup):
    task, problems, policy, responses = setup
    pos = [(i, t) for i in range(4) for t in range(3)]
    one = branch_values(policy, task, problems, responses, pos, K=6, cap=5, seed=1)
    many = branch_values(policy, task, problems, responses, pos, K=6, cap=5, seed=1,
                         rows_per_chunk=12)
    for k in ("rewards_with", "rewards_without", "D", "p"):
        assert np.array_equal(one[k], many[k], equal_nan=True), k


def test_a_tiny_model_runs_on_the_fast_engine_within_the_cap():
    cfg = TrainConfig(task="kk", model="tiny", n_people=2)
    task = get_task("kk", n_people=2)
    model = load_model(cfg, task)
    assert isinstance(decoder_of(model), InferenceEngine)
    problems = task.problems(2, seed=1)
    responses = [task.encode(" T F") + [task.eos_id], task.encode(" F")]   # the second: cut
    out = branch_values(model, task, problems, responses, [(0, 0), (0, 2), (1, 0)], K=3,
                        cap=3, seed=0)
    assert out["rewards_with"].shape == (3, 3)
    assert np.all((out["D"] >= 0) & (out["D"] <= 1 - out["p"] + 1e-6))
    assert np.all(np.isin(out["rewards_with"], (0.0, 0.1, 1.0)))
