"""The scripted policy of ``tests/lopti/decisive/scripted.py``: its exact values, and the
branch estimator of ``tailtheory/lopti/decisive/branches.py`` agreeing with them within its error."""

from __future__ import annotations

import numpy as np
import pytest

from tailtheory.engine.tasks.task import get_task
from tailtheory.lopti.decisive.branches import branch_values
from tests.lopti.decisive.scripted import ScriptedPolicy, exact_decisiveness

EPS = 0.3


@pytest.fixture(scope="module")
def setup():
    task = get_task("kk", n_people=3)
    problems = task.problems(6, seed=3)
    policy = ScriptedPolicy(task, problems, EPS)
    responses = []
    for k, p in enumerate(problems):           # planted errors: none, one early, one late, ...
        a = policy.answers[tuple(p.prompt_ids)]
        wrong = {1: 0, 2: 2, 3: 1, 4: 0}.get(k)
        r = [(policy.F_id if x == policy.T_id else policy.T_id) if j == wrong else x
             for j, x in enumerate(a)]
        responses.append(r + [task.eos_id])
    return task, problems, policy, responses


def test_exact_values_follow_the_planted_error_rate(setup):
    task, problems, policy, responses = setup
    first = exact_decisiveness(policy, problems[0], responses[0], 0)
    stay = (1 - EPS) ** 2
    assert first["p"] == pytest.approx(1 - EPS)
    assert first["gap"] == pytest.approx(stay + 0.1 * (1 - stay) - 0.1)
    assert first["D"] == pytest.approx(EPS * first["gap"])
    wrong = exact_decisiveness(policy, problems[1], responses[1], 0)   # the planted error
    assert wrong["p"] == pytest.approx(EPS) and wrong["gap"] == pytest.approx(-first["gap"])
    after = exact_decisiveness(policy, problems[1], responses[1], 1)   # after an error: free
    assert after["D"] == 0.0 and after["gap"] == 0.0
    eos = exact_decisiveness(policy, problems[0], responses[0], 3)
    assert eos["D"] == 0.0 and np.isnan(eos["gap"])


def test_branch_estimates_agree_with_the_exact_values(setup):
    task, problems, policy, responses = setup
    pos = [(i, t) for i in range(len(responses)) for t in range(4)]
    out = branch_values(policy, task, problems, responses, pos, K=300, cap=5, seed=2)
    for k, (i, t) in enumerate(pos):
        ex = exact_decisiveness(policy, problems[i], responses[i], t)
        assert out["p"][k] == pytest.approx(ex["p"], abs=1e-6)
        # 4 standard errors, and an absolute floor for the exact zeros (no spread there)
        assert abs(out["D"][k] - ex["D"]) <= 4 * out["D_se"][k] + 1e-6, (i, t)
        if np.isnan(ex["gap"]):
            assert np.isnan(out["gap"][k]) and out["D"][k] == 0.0
    # the estimator is not vacuous: the exact D spans [0, ~0.2] and the estimates follow it
    exact = np.array([exact_decisiveness(policy, problems[i], responses[i], t)["D"]
                      for i, t in pos])
    assert exact.max() > 0.15 and np.corrcoef(exact, out["D"])[0, 1] > 0.95
