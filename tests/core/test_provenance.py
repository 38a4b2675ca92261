"""Warm starts are models, not configs (``tailtheory/core/provenance.py``): a weights fingerprint
tells two models apart by one bit, every stored row carries its run's starting model and CPU, and
a stored measurement never mixes rows from two models under one warm-start key."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from tailtheory.core.measurements import load_measurement, save_measurement
from tailtheory.core.models import tiny_lm
from tailtheory.core.provenance import (ROW_NAMES, MixedStarts, check_one_start, cpu_model,
                                        machine, measured_on, provenance, weights_fingerprint)
from tailtheory.experiments import incremental as inc
from tailtheory.engine.config import TrainConfig
from tailtheory.experiments.runs import run_key, runs_root
from tailtheory.experiments.study import Arm, Study
from tailtheory.engine.load import PROVENANCE, read_provenance
from tailtheory.engine.trainer import train
from tests.experiments.test_incremental import places  # noqa: F401 (the fixture: cache and results)


def _row(seed, weights, start="3fe2ba9c7ca5", cpu="CPU A (AVX512)"):
    return {"seed": seed, "final_reward": 0.5, "provenance": provenance(start, weights, cpu)}


def test_fingerprint_tells_models_apart_by_one_ulp():
    a = tiny_lm(vocab_size=32, hidden=16, layers=1, heads=2, kv_heads=1, seed=0)
    b = tiny_lm(vocab_size=32, hidden=16, layers=1, heads=2, kv_heads=1, seed=0)
    assert weights_fingerprint(a) == weights_fingerprint(b)
    with torch.no_grad():  # the smallest change a CPU's other kernels make: one float32 ulp
        p = next(b.parameters())
        p.view(-1)[0] = torch.nextafter(p.view(-1)[0], torch.tensor(float("inf")))
    assert weights_fingerprint(a) != weights_fingerprint(b)


def test_cpu_model_names_the_kernels_instruction_set():
    assert cpu_model() and "(" in cpu_model()


def test_a_measured_row_names_the_model_and_the_machine():
    """``measured_on``: the model's own fingerprint (of its float32 weights) unless a start's is
    given, and the machine of the device its parameters are on; exactly :data:`ROW_NAMES`."""
    model = tiny_lm(vocab_size=32, hidden=16, layers=1, heads=2, kv_heads=1, seed=0)
    named = measured_on(model)
    assert tuple(named) == ROW_NAMES and named["machine"] == machine() == cpu_model()
    assert named["weights"] == weights_fingerprint(model)
    assert measured_on(model, "0910fc60bac33f64")["weights"] == "0910fc60bac33f64"


def test_rows_from_two_models_under_one_key_are_refused():
    rows = [("GRPO", _row(1, "aaaa")), ("GRPO", _row(2, "bbbb", cpu="CPU B (AVX2)"))]
    with pytest.raises(MixedStarts) as err:
        check_one_start(rows, "results/x.json", "FIX")
    msg = str(err.value)
    for part in ("3fe2ba9c7ca5", "aaaa", "bbbb", "CPU A (AVX512)", "CPU B (AVX2)", "FIX"):
        assert part in msg
    # other keys, models built from a seed and rows without a record are not compared
    check_one_start([("A", _row(1, "aaaa")), ("B", _row(1, "bbbb", start="other")),
                     ("C", _row(1, "cccc", start=None)), ("D", {"seed": 1})], "x", "FIX")


def test_a_store_is_neither_extended_nor_replaced_with_another_models_rows(places):
    save_measurement("demo", {"k": 1}, {"GRPO": [_row(1, "aaaa")]}, "tailtheory study demo")
    path = places / "results" / "demo.json"
    before = path.read_text()
    for data in ({"GRPO": [_row(1, "aaaa"), _row(2, "bbbb")]},   # extended with a second model
                 {"GRPO": [_row(1, "bbbb")]}):                    # replaced by another machine's
        with pytest.raises(MixedStarts, match="TAILTHEORY_RESULTS=results-local"):
            save_measurement("demo", {"k": 1}, data, "tailtheory study demo")
        assert path.read_text() == before                         # nothing lost
    # reading a file that mixes them (edited by hand, or merged) is refused too
    record = json.loads(before)
    record["data"]["GRPO"].append(_row(2, "bbbb"))
    path.write_text(json.dumps(record))
    with pytest.raises(MixedStarts):
        load_measurement("demo", {"k": 1})


def test_a_run_records_its_start_and_every_stored_row_carries_it(places):
    cfg = TrainConfig(model="tiny", steps=2, eval_every=0, prompts_per_step=2, group_size=2,
                      out=str(places / "run"))
    train(cfg, progress=False)
    prov = read_provenance(places / "run")
    assert prov == {"start": None, "weights": prov["weights"], "cpu": cpu_model()}
    assert len(prov["weights"]) == 16
    study = Study("demo_prov", lambda preset: [Arm("GRPO", (replace(cfg, out=None),),
                                                   {"method": "grpo"})],
                  measure_preset="quick")
    row = study.run_numbers(places / "run", cfg)
    assert row["provenance"] == prov


def test_store_done_refuses_a_cache_run_from_another_warm_start(places):
    def arms(preset):
        base = TrainConfig(model="tiny", steps=2)
        return [Arm("GRPO", tuple(replace(base, seed=s) for s in (0, 1)), {"method": "grpo"})]

    study = Study("demo_mixed", arms, measure_preset="quick")
    for cfg, weights in zip(study.plan("quick")[0].configs, ("aaaa", "bbbb")):
        run = runs_root() / run_key(cfg)
        run.mkdir(parents=True)
        lines = [{"step": t, "reward/mean": 0.1, "rollout/len_mean": 5.0, "policy/entropy": 1.0,
                  "eval/accuracy": None} for t in range(2)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
        (run / PROVENANCE).write_text(json.dumps(provenance("warmkey", weights, "CPU X")))
    with pytest.raises(MixedStarts, match="warmkey"):
        inc.store_done(study)
    assert not (places / "results" / "demo_mixed.json").exists()
