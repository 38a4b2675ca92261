"""V6 along the ladder (``tailtheory/tim/dose_ladder.py``): the bisection finds a target on a
known increasing curve and refuses one outside it; the batch's k3 is 0 on the float32 sampler
and grows with sigma on a tiny model; a rung not built names its build. Nothing is trained."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailtheory.engine.config import TrainConfig
from tailtheory.engine.start.load import load_model
from tailtheory.engine.tasks.task import get_task
from tailtheory.tim import dose_ladder as dl


def test_bisection_on_a_known_curve():
    calls = []

    def k3_of(sigma):
        calls.append(sigma)
        return 0.01 * sigma ** 2
    sigma, k = dl.calibrate(k3_of, 0.19)
    assert sigma == pytest.approx(0.19 ** 0.5 * 10, rel=0.01) and k == pytest.approx(0.19, rel=0.02)
    assert len(calls) == dl.ITERATIONS + 2
    with pytest.raises(ValueError, match="outside"):
        dl.calibrate(k3_of, 10.0)


def test_batch_k3_is_zero_without_noise_and_grows_with_it():
    cfg = TrainConfig(task="kk", model="tiny", n_people=2, prompts_per_step=2, group_size=2,
                      method="grpo", seed=1)
    task = get_task("kk", n_people=2)
    model = load_model(cfg, task)
    ks = [dl.batch_k3(model, task, cfg, s) for s in (0.0, 0.5, 2.0)]
    assert ks[0] < 1e-9 and 0 < ks[1] < ks[2]
    again = dl.batch_k3(model, task, replace(cfg), 0.5)
    assert again == ks[1]                     # the same random numbers at the same sigma


def test_a_rung_not_built_names_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    with pytest.raises(ValueError, match="tailtheory ladder build --rung w192"):
        dl.measure_noise_sigmas(["w192"])
