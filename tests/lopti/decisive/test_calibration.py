"""The calibration rule of ``tailtheory/lopti/decisive/calibration.py`` on tokens written by
hand: tau calls at most 10% of the free tokens decisive, K brings the error under tau / 3."""

from __future__ import annotations

import numpy as np
import pytest

from provenance_check import check_named
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.load import load_model
from tailtheory.engine.tasks.task import get_task
from tailtheory.lopti.decisive import calibration as dc


def _tokens(free_D, fork_D, se=0.01):
    return ([{"role": "synonym", "D": d, "D_se": se} for d in free_D]
            + [{"role": "fork", "D": d, "D_se": se} for d in fork_D])


def test_tau_is_the_smallest_threshold_with_at_most_a_tenth_of_free_tokens_above():
    free = np.linspace(0.0, 0.099, 100)            # 0.000 ... 0.099
    c = dc.choose(_tokens(free, [0.5] * 20))
    assert c["free_called"] <= dc.FREE_CALLED_MAX
    assert np.mean(free >= c["tau"]) <= 0.10
    # one step lower would call more than a tenth: the 11th largest free D reaches it
    assert np.sort(free)[::-1][10] < c["tau"] <= 0.091
    assert c["precision"] == pytest.approx(20 / (20 + np.sum(free >= c["tau"])))
    assert c["recall"] == 1.0 and c["n_free"] == 100 and c["n_fork"] == 20


def test_k_is_the_smallest_choice_under_a_third_of_tau():
    free = np.linspace(0.0, 0.099, 100)
    tau = dc.choose(_tokens(free, []))["tau"]
    se = tau / 3 * np.sqrt(32 / dc.CAL_K) * 0.99   # just under tau / 3 once K = 32
    assert dc.choose(_tokens(free, [], se=se))["K"] == 32
    noisy = dc.choose(_tokens(free, [], se=10.0))           # no choice meets the bound
    assert noisy["K"] == dc.CAL_K and not noisy["se_met"] and noisy["K_free"] > 128
    # the forks' error does not choose K; the K they would need is reported beside
    mixed = _tokens(free, [], se=se) + [{"role": "fork", "D": 0.5, "D_se": 1.0}] * 30
    c = dc.choose(mixed)
    assert c["K"] == 32 and c["K_all"] > 128
    with pytest.raises(ValueError, match="too few"):
        dc.choose(_tokens(free[:5], []))


def test_round_up_keeps_the_rule():
    assert dc._round_up(0.0812, 2) == pytest.approx(0.082)
    assert dc._round_up(0.08, 2) == pytest.approx(0.08)
    assert dc.calibration_config()["task"] == "kk_prose"


def test_the_calibration_names_the_warm_start(monkeypatch):
    """The calibration names the warm start it probed and the machine: one batch of a tiny
    model on ``kk`` (two prompts), the branch rollouts and the rule stubbed."""
    cfg = TrainConfig(task="kk", model="tiny", n_people=2, prompts_per_step=2, group_size=2,
                      method="grpo", seed=1)
    task = get_task("kk", n_people=2)
    model = load_model(cfg, task)
    monkeypatch.setattr(dc, "probed_policy", lambda policy, recipe, progress=True: (model, task))
    monkeypatch.setattr(dc, "grpo_config", lambda recipe: cfg)
    monkeypatch.setattr(dc, "CAL_PROMPTS", 2)
    monkeypatch.setattr(dc, "branch_values", lambda m, t, problems, responses, pos, *a, **kw: {
        k: [0.0] * len(pos) for k in ("D", "D_se", "effect", "gap", "gap_se")})
    monkeypatch.setattr(dc, "choose", lambda tokens: {"tau": 0.1, "K": dc.CAL_K})
    data = dc.measure_calibration(progress=False)
    assert data["tau"] == 0.1 and all(t["D"] == 0.0 for t in data["tokens"])
    check_named(data, weights_fingerprint(model), machine())
