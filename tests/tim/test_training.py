"""Mismatch in training (``tailtheory/tim/training.py``, claim V3): the contribution
``C = -(r - 1) A`` against its definition, the verdict rules on hand-made numbers (both ways),
the plan, and the token pipeline on a tiny model's real dump."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tailtheory.core.registry import Verdict
from tailtheory.tim import training as mt


def _tokens(log_rho, adv, bypass: bool):
    """A token dump: ``logp_roll`` arbitrary, ``log pi_train = logp_roll + log_rho``, ``pi_old``
    the rollout's (bypass) or the trainer's (recompute)."""
    f32 = np.float32
    roll = -np.linspace(0.1, 2.0, len(log_rho), dtype=f32)             # float32, as the engine's
    train = (roll + np.asarray(log_rho, dtype=f32)).astype(f32)
    log_rho = (train - roll).astype(f32)                                 # the engine's float32 diff
    return pd.DataFrame({"step": 0, "seq": np.arange(len(adv)) // 2,
                         "logp_roll": roll.astype(float), "log_rho": log_rho.astype(float),
                         "logp_old": (roll if bypass else train).astype(float), "adv": adv})


def test_contribution_by_hand():
    """V3: under bypass ``C = -(rho - 1) A``; under recompute ``r = 1`` so ``C = 0``."""
    log_rho, adv = [math.log(0.5), math.log(2.0), 0.0, math.log(1.5)], [1.0, 1.0, -2.0, -2.0]
    c = mt.contribution(_tokens(log_rho, adv, bypass=True))
    assert c == pytest.approx([0.5, -1.0, 0.0, 1.0], rel=1e-5)  # -(.5-1)1, -(2-1)1, 0, -(.5)(-2)
    assert (mt.contribution(_tokens(log_rho, adv, bypass=False)) == 0).all()   # exactly


def test_v3_token_numbers_against_a_loop():
    rng = np.random.default_rng(0)
    log_rho = rng.normal(0, 0.05, 200) * (rng.random(200) < 0.5)
    adv = rng.choice([-1.0, 0.0, 1.0], 200)
    df = _tokens(log_rho, adv, bypass=True)
    v3 = mt.v3_token_numbers(df)
    c = [-(math.exp(lr) - 1) * a for lr, a in zip(df["log_rho"], adv)]
    for sign, keep in (("pos", lambda a: a > 0), ("neg", lambda a: a < 0)):
        xs = [x for x, a in zip(c, adv) if keep(a)]
        assert v3[sign]["n"] == len(xs) and sum(v3[sign]["hist"]) == len(xs)
        assert v3[sign]["nonzero"] == sum(x != 0 for x in xs)
        assert v3[sign]["positive"] == sum(x > 0 for x in xs)
        assert v3[sign]["sum"] == pytest.approx(sum(xs), rel=1e-9, abs=1e-15)
    assert v3["zero_adv"] == sum(a == 0 for a in adv)
    assert v3["max_abs_c"] == pytest.approx(max(abs(x) for x in c), rel=1e-9)


def test_skew_by_hand():
    v3 = {"pos": {"positive": 3, "nonzero": 4}, "neg": {"positive": 1, "nonzero": 4}}
    assert mt.skew(v3) == pytest.approx(0.75 - 0.25)
    assert mt.skew({"pos": {"positive": 0, "nonzero": 0}, "neg": v3["neg"]}) == -0.25


# --- hand-made measurements ------------------------------------------------------------------

def _run(final, skew=0.2, k3=(1e-4, 1e-4), reward=None, ratio=1.0, clip=0.0, zero_c=True):
    """One run's numbers: final reward, a V3 block with the given skew, k3 first/final."""
    pos, neg = int(50 + 50 * skew), int(50 - 50 * skew)
    v3 = {"max_abs_c": 0.0 if zero_c else 0.1, "zero_adv": 0,
          "pos": {"n": 100, "nonzero": 100, "positive": pos, "sum": 0.0,
                  "quantiles": [0.0] * 7, "hist": [0] * (len(mt.C_EDGES) - 1)},
          "neg": {"n": 100, "nonzero": 100, "positive": neg, "sum": 0.0,
                  "quantiles": [0.0] * 7, "hist": [0] * (len(mt.C_EDGES) - 1)}}
    n = 20
    return {"seed": 0, "final_reward": final, "final_eval": final, "first_reward": 0.3,
            "reward": reward or [0.3] * n, "k3": [k3[0]] * 10 + [k3[1]] * 10, "k1": [0.0] * n,
            "abs_mean": [0.0] * n, "ratio_mean": [ratio] * n, "clipfrac": [clip] * n,
            "v3": v3}


def _data(mismatch_final=0.3, skew=0.2, k3_final=1e-4, **kw):
    """Every main label at three seeds (+-0.01); ``mismatch_final`` for the mismatch runs."""
    data = {}
    for path in mt.PATHS:
        for mode in mt.MODES:
            final = 0.3 if path == "exact" else mismatch_final
            data[mt._label(path, mode)] = [
                _run(final + d, skew=skew if mode == "bypass" else 0.0,
                     k3=(1e-4, k3_final), zero_c=path == "exact", **kw)
                for d in (-0.01, 0.0, 0.01)]
    return data


def test_v3_rule_both_ways():
    assert mt.v3_evidence(_data(skew=0.2)).verdict == Verdict.TOY_SCALE
    assert mt.v3_evidence(_data(skew=0.0)).verdict == Verdict.NOT_REPRODUCED
    assert mt.v3_evidence(_data(skew=-0.2)).verdict == Verdict.REFUTED
    # recompute's ratio must be exactly 1 at its one update
    assert mt.v3_evidence(_data(skew=0.2, ratio=1.01)).verdict == Verdict.NOT_REPRODUCED
    # at zero mismatch the modes must coincide bitwise
    bad = _data(skew=0.2)
    bad["exact bypass"][0] = {**bad["exact bypass"][0], "reward": [0.9] * 20}
    assert mt.v3_evidence(bad).verdict == Verdict.REFUTED


def test_token_pipeline_on_a_tiny_run(tmp_path):
    """V3 on a real dump: exact bypass gives C = 0; bf16 bypass gives C = -(rho - 1) A."""
    from tests.engine.test_trainer import SMALL, DenseKK

    from tailtheory.engine.config import TrainConfig
    from tailtheory.experiments.run_numbers import read_tokens
    from tailtheory.engine.trainer import train
    from tailtheory.tim.length_acceptance import T14_DELTAS

    out = {}
    for path in ("exact", "bf16"):
        cfg = TrainConfig(**SMALL, rollout=path, pi_old="bypass", steps=1, dump_tokens=True,
                          out=str(tmp_path / path))
        train(cfg, progress=False, task=DenseKK())
        out[path] = mt.STUDY.run_numbers(cfg.out, cfg)
        df = read_tokens(cfg.out, 1)
        want = -(np.exp(df["log_rho"]) - 1) * df["adv"]
        assert np.allclose(mt.contribution(df), want, rtol=1e-9, atol=0)
    assert out["exact"]["v3"]["max_abs_c"] == 0.0
    assert out["bf16"]["v3"]["max_abs_c"] > 0.0
    assert set(out["bf16"]["t14"]) == {f"{d:g}" for d in T14_DELTAS}
    with pytest.raises(FileNotFoundError, match="dump_tokens=True"):
        read_tokens(tmp_path / "exact", 5)


def test_learn_study_shares_the_dose_studys_real_path_runs():
    """V3 on the learn preset: its bf16 / fp8 recompute and fp8 bypass arms are the dose
    study's real-path runs (same run keys); every run dumps its tokens."""
    from tailtheory.experiments.runs import run_key
    from tailtheory.experiments.study import get_study

    mine = mt.STUDY.configs("learn")
    dose = get_study("mismatch_dose").configs("learn")
    for label in ("bf16 recompute", "fp8 recompute", "fp8 bypass"):
        assert [run_key(c) for c in mine[label]] == [run_key(c) for c in dose[f"GRPO | {label}"]]
    assert all(c.dump_tokens for cs in mine.values() for c in cs)
    assert {c.steps for c in mine["exact bypass"]} == {mt.EXACT_BYPASS_STEPS}
    assert {a.label: dict(a.tags) for a in mt.learn_arms("learn")}["fp8 bypass"] == {
        "path": "fp8", "pi_old": "bypass"}


def test_quick_plan_is_a_pipeline_check_of_the_same_arms(monkeypatch, tmp_path):
    from tailtheory.experiments import presets

    monkeypatch.setattr(presets, "warm_model", lambda preset, progress=True: tmp_path)
    plan = mt.STUDY.configs("quick")
    assert list(plan) == [mt._label(p, m) for p in mt.PATHS for m in mt.MODES]
    assert {len(v) for v in plan.values()} == {len(presets.SEEDS["quick"])}
    assert all(c.dump_tokens and (c.rollout, c.pi_old) == (a.tags["path"], a.tags["pi_old"])
               for a in mt.learn_arms("quick") for c in a.configs)
