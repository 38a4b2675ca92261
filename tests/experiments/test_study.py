"""The experiment type (``tailtheory/experiments/study.py``): arms checked and frozen, a study
measured on hand-written runs, and every registered study keyed as its stored measurement."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tailtheory.core.registry import Verdict
from tailtheory.experiments import study as st
from tailtheory.engine.config import TrainConfig


def _arm(label, tags=None, n=2, **over):
    return st.Arm(label, tuple(TrainConfig(seed=s, **over) for s in range(n)), tags or {})


def test_arms_are_checked_and_frozen():
    with pytest.raises(ValueError, match="label"):
        _arm("")
    with pytest.raises(ValueError, match="no configs"):
        st.Arm("x", ())
    a = _arm("AR", {"method": "ar"}, method="ar")
    assert a.matches(method="ar") and a.matches(label="AR") and not a.matches(method="grpo")
    assert not a.matches(path="fp8")                           # an absent tag never matches
    with pytest.raises(TypeError):
        a.tags["method"] = "grpo"                              # read-only


def _fake_run(path, cfg, steps=3, dump=False):
    """A run directory as the trainer writes it: config, metric lines, token dump."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"seed": cfg.seed, "method": cfg.method}))
    lines = [{"step": t, "reward/mean": 0.1 * t + cfg.seed, "rollout/len_mean": 10.0,
              "policy/entropy": 1.0, "mismatch/k3": 1e-3 * t,
              "eval/accuracy": 0.5 if t % 2 == 0 else None} for t in range(steps)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    if dump:
        import pandas as pd

        (path / "tokens").mkdir()
        for t in range(steps):
            pd.DataFrame({"log_rho": [0.0, 0.1]}).to_parquet(
                path / "tokens" / f"step_{t:06d}.parquet")


def test_study_measures_runs_into_numbers(monkeypatch, tmp_path):
    from tailtheory.experiments import runs

    def arms(preset):
        base = TrainConfig(steps=3)
        return [st.Arm("A", tuple(replace(base, seed=s, dump_tokens=True) for s in (0, 1)),
                       {"method": "grpo"}),
                st.Arm("A again", tuple(replace(base, seed=s, dump_tokens=True) for s in (0, 1)),
                       {"method": "grpo"}, tokens=False)]

    def fake_run_many(configs, workers=1, progress=True):
        out = []
        for i, c in enumerate(configs):
            p = tmp_path / f"run{i}"
            _fake_run(p, c, dump=c.dump_tokens)
            out.append(p)
        return out

    monkeypatch.setattr(st, "run_many", fake_run_many)
    study = st.Study("demo", arms, series={"k3": "mismatch/k3",
                                           "double": lambda m: 2 * m["reward/mean"]},
                     tokens={"n_tokens": lambda df: len(df)})
    m = study.measure("quick")
    r = m["A"][1]
    assert r["seed"] == 1 and r["k3"] == [0.0, 1e-3, 2e-3]
    assert r["double"] == pytest.approx([2.0, 2.2, 2.4])
    assert r["final_reward"] == pytest.approx(1.1) and r["eval_steps"] == [0, 2]
    assert r["n_tokens"] == 6                                   # 2 tokens x 3 steps
    assert "n_tokens" not in m["A again"][0]                    # the arm declines token numbers
    assert study.command == "tailtheory study demo"


def test_study_plan_refuses_repeated_labels_and_foreign_configs():
    dup = st.Study("dup", lambda preset: [_arm("A"), _arm("A")])
    with pytest.raises(ValueError, match="repeats an arm label"):
        dup.plan("quick")
    bad = st.Study("bad", lambda preset: [st.Arm("A", ({"seed": 0},))])
    with pytest.raises(TypeError, match="non-TrainConfig"):
        bad.plan("quick")


def test_every_study_is_registered_and_keyed_as_its_stored_measurement():
    """Moving a study between modules changes no fingerprint: each registered study's identity
    is the config its stored measurement was made under. A study still being trained (stored run
    by run, some seeds missing) is checked row by row too; its verdicts wait for every seed
    (``Study.data`` refuses a partial store)."""
    from tailtheory.core.measurements import results_dir
    from tailtheory.experiments.incremental import load_done

    found = st.studies()
    assert set(found) == {"lopti_learn", "dvp_learn", "otb_learn", "mismatch_learn",
                          "mismatch_dose", "learn_curve", "matched_curve", "dvp_matched",
                          "lopti_matched", "decide_curve", "precision_matched", "dose_ladder",
                          "upweight_decide", "top_entropy_decide", "random_tokens_decide",
                          "decide_designs", "upweight_matched", "top_entropy_matched",
                          "random_tokens_matched"}
    for name, study in found.items():
        stored = json.loads((results_dir() / f"{name}.json").read_text())
        assert stored["command"] == study.command == f"tailtheory study {name}", name
        load_done(study)             # run by run: every stored row is the code's run today
    with pytest.raises(ValueError, match="unknown study 'nope'; studies: "):
        st.get_study("nope")
    with pytest.raises(ValueError, match="already registered"):
        st.register_study(st.Study("lopti_learn", lambda preset: []))
