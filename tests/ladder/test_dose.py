"""V6 along the ladder (``tailtheory/ladder/dose.py``): the bisection finds a target on a
known increasing curve and refuses one outside it; the batch's k3 is 0 on the float32 sampler
and grows with sigma on a tiny model; a rung not built names its build. Nothing is trained."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from provenance_check import check_named
from tailtheory.core.models import tiny_lm
from tailtheory.core.provenance import cpu_model, weights_fingerprint
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.load import load_model
from tailtheory.engine.tasks.task import get_task
from tailtheory.ladder import dose as dl


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


def test_calibration_rows_name_the_warm_start(tmp_path, monkeypatch):
    """A rung's calibrated sigmas name its warm start's key and fingerprint and the CPU (the warm
    start a tiny model, the batch's k3 a known curve of sigma)."""
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    model = tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1, seed=2)
    monkeypatch.setattr(dl, "warm_policy", lambda name, cfg: (model, None, Path("key")))
    monkeypatch.setattr(dl, "batch_k3", lambda m, task, cfg, sigma: 0.01 * sigma ** 2)
    row = dl.measure_noise_sigmas(["base"])["base"]
    assert row["warm_key"] == "key" and set(row["targets"]) == {str(t) for t in dl.TARGETS}
    check_named(row, weights_fingerprint(model), cpu_model())


def test_the_studys_arms_share_the_recipes_runs_and_the_calibrated_sigmas():
    import json

    from tailtheory.core.measurements import measurement_path
    from tailtheory.experiments.learning import MATCHED_STUDY
    from tailtheory.experiments.runs import run_key

    arms = {a.label: a for a in dl.STUDY.plan("matched")}
    curve = MATCHED_STUDY.plan("matched")[0].configs
    exact = arms["base | GRPO | exact"].configs                # 5 seeds; the curve has 3
    assert [run_key(c) for c in exact[:len(curve)]] == [run_key(c) for c in curve]
    assert {c.rung for c in arms["w256 | GRPO | exact"].configs} == {"w256"}
    assert len(arms["w256 | GRPO | exact"].configs) == 5
    stored = json.loads(measurement_path(dl.CALIBRATION).read_text())["data"]
    for name, sigmas in dl.SIGMAS.items():
        cal = [stored[name]["targets"][str(t)]["sigma"] for t in dl.TARGETS]
        assert sigmas == pytest.approx(cal, abs=1e-4), name       # written as calibrated
        for t, s in zip(dl.TARGETS, sigmas):
            cfgs = arms[f"{name} | GRPO | logit k3={t:g}"].configs
            assert {(c.rollout, c.rollout_noise, c.rung) for c in cfgs} == {
                ("logit_noise", s, name)} and len(cfgs) == 3
    with pytest.raises(ValueError, match="matched preset"):
        dl.ladder_dose_arms("learn")


def _run(seed: int, final: float, k3: float, warm: float = 0.35) -> dict:
    return {"seed": seed, "final_eval": final, "final_reward": final,
            "eval": [warm] + [final] * 11, "eval_steps": list(range(0, 120, 10)),
            "reward": [0.3] * 20 + [0.4] * 80 + [0.6] * 20, "k3": [k3] * 4, "format": [0.9] * 4}


def _data(finals: dict[str, tuple]) -> dict:
    """rung -> (exact's final, the four noise points' finals); each point's k3 its target."""
    data = {}
    for name, (exact, points) in finals.items():
        data[f"{name} | GRPO | exact"] = [_run(s, exact + 0.002 * s, 0.0) for s in range(1, 6)]
        for t, v in zip(dl.TARGETS, points):
            if v is not None:
                data[f"{name} | GRPO | logit k3={t:g}"] = [_run(s, v + 0.002 * s, t)
                                                          for s in (1, 2, 3)]
    return data


@pytest.mark.parametrize("finals, verdict, intervals", [
    # base harmed from 0.19, w256 from 0.19: the intervals [0.065, 0.19] overlap
    ({"base": (0.6, (0.6, 0.6, 0.3, 0.2)), "w256": (0.6, (0.6, 0.6, 0.3, 0.2))}, "STAYS",
     {"base": (0.065, 0.19), "w256": (0.065, 0.19)}),
    # w256 harmed already at 0.065: [0.02, 0.065] against base's [0.065, 0.19] touch: overlap
    ({"base": (0.6, (0.6, 0.6, 0.3, 0.2)), "w256": (0.6, (0.6, 0.3, 0.3, 0.2))}, "STAYS",
     {"base": (0.065, 0.19), "w256": (0.02, 0.065)}),
    # w256 harmed only at 0.5: [0.19, 0.5] against [0.02, 0.065]: disjoint
    ({"base": (0.6, (0.6, 0.3, 0.3, 0.2)), "w256": (0.6, (0.6, 0.6, 0.6, 0.2))}, "MOVES",
     {"base": (0.02, 0.065), "w256": (0.19, 0.5)}),
    # w256 never harmed: no threshold there, nothing said
    ({"base": (0.6, (0.6, 0.6, 0.3, 0.2)), "w256": (0.6, (0.6, 0.6, 0.6, 0.6))},
     "UNDETERMINED", {"base": (0.065, 0.19)}),
    # base's exact does not learn (gain 0.05 < 0.15)
    ({"base": (0.4, (0.4, 0.4, 0.2, 0.1)), "w256": (0.6, (0.6, 0.6, 0.3, 0.2))},
     "UNDETERMINED", {"w256": (0.065, 0.19)}),
    # w256's largest point not run yet
    ({"base": (0.6, (0.6, 0.6, 0.3, 0.2)), "w256": (0.6, (0.6, 0.6, 0.3, None))}, "PENDING",
     {"base": (0.065, 0.19)}),
])
def test_the_transfer_rule_reaches_each_verdict(monkeypatch, finals, verdict, intervals):
    monkeypatch.setitem(dl.SIGMAS, "w256", (0.5, 1.0, 1.5, 2.0))
    out = dl.transfer(dl.rung_thresholds(_data(finals)))
    assert out["verdict"] == verdict, out
    assert set(out["intervals"]) == set(intervals)
    for name, (lo, hi) in intervals.items():
        assert out["intervals"][name] == pytest.approx((lo, hi)), name


def test_nothing_stored_is_pending():
    assert dl.transfer(dl.rung_thresholds({}))["verdict"] == "PENDING"


def test_stored_transfer_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    monkeypatch.setattr(dl, "SIGMAS", {"base": dl.SIGMAS["base"]})
    out = dl.stored_transfer()
    assert out["verdict"].startswith("PENDING (22 of 22 runs missing: tailtheory study dose_ladder")
    assert "tailtheory ladder calibrate --rung w256" in out["verdict"]
    assert out["missing"]["w256 | GRPO | exact"] == [1, 2, 3, 4, 5]
