"""L1, L4 and L5 on the ``decide`` recipe at two sizes (``tailtheory/ladder/decide.py``):
the two-size verdict on data built to reach each one, the probes' numbers on a tiny model, the
warm start each size is measured on, and the ladder's effects routing the part to its sizes only.
No rung above the base is built."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tailtheory.core.models import tiny_lm
from tailtheory.engine.start.rungs import RUNGS, non_embedding_params, rung
from tailtheory.engine.tasks.task import get_task
from tailtheory.experiments.policies import grpo_config
from tailtheory.ladder import decide as size_decide, effects as size
from tailtheory.ladder.decide import PART, TWO_SIZES, decide_sizes

LO, HI = TWO_SIZES
DECADES = math.log10(non_embedding_params(rung(HI).warm("kk_knights").model)
                     / non_embedding_params(rung(LO).warm("kk_knights").model))
EFFECT = {"L1 Spearman": ("lopti", "l1_rho", 0.03)}


def _data(lo, hi):
    return {LO: {PART: {str(i + 1): {"l1_rho": v} for i, v in enumerate(lo)}},
            HI: {PART: {str(i + 1): {"l1_rho": v} for i, v in enumerate(hi)}}}


def test_the_larger_size_is_8x_the_base_outside_the_embedding():
    assert DECADES == pytest.approx(math.log10(4727040 / 592000))


@pytest.mark.parametrize("lo,hi,verdict", [
    ((0.50, 0.51, 0.49), (0.70, 0.71, 0.69), "GROWS"),
    ((0.50, 0.51, 0.49), (0.30, 0.31, 0.29), "SHRINKS"),
    ((0.500, 0.501, 0.499), (0.501, 0.502, 0.500), "FLAT"),
    ((0.50, 0.60, 0.40), (0.52, 0.62, 0.42), "UNRESOLVED"),
])
def test_each_two_size_verdict(lo, hi, verdict):
    r = decide_sizes(_data(lo, hi), EFFECT)["L1 Spearman"]
    assert r["verdict"] == verdict
    assert r["slope"] == pytest.approx((sum(hi) - sum(lo)) / 3 / DECADES)
    se = math.sqrt(sum(sum((x - sum(v) / 3) ** 2 for x in v) / 2 / 3 for v in (lo, hi)))
    assert r["se"] == pytest.approx(se / DECADES)


def test_pending_until_both_sizes_have_three_seeds_and_only_lopti_effects():
    r = decide_sizes(_data((0.5, 0.6, 0.7), (0.5, math.nan)), {**EFFECT, "M7 slope": (
        "tail", "m7_slope", 0.03)})
    assert set(r) == {"L1 Spearman"} and "slope" not in r["L1 Spearman"]
    assert r["L1 Spearman"]["verdict"] == f"PENDING ({LO} 3 of 3 seeds, {HI} 1 of 3 seeds)"
    assert "PENDING" in size_decide.decide_table({}, EFFECT)


def test_decide_numbers_on_a_tiny_model():
    model = tiny_lm(vocab_size=512, hidden=32, layers=1, heads=2, kv_heads=1, seed=0)
    cfg = replace(grpo_config("decide"), prompts_per_step=2, group_size=2)
    out = size_decide.decide_numbers(model, get_task("kk_knights"), seed=1, batches=1, cfg=cfg)
    assert set(out) == {k for _, k, _ in size.EFFECTS.values()
                        if k.startswith(("l1", "l4", "l5"))} | {"bin_fractions"}
    assert len(out["bin_fractions"]) == 4 and sum(out["bin_fractions"]) == pytest.approx(1.0)
    line = size_decide.decide_table({LO: {PART: {"1": {**out, "bin_fractions": [0.125, 0, 0,
                                                                                 0.875]}}}},
                                    EFFECT).splitlines()[-1]
    assert line == f"lowest pi_old bin's share of response tokens: {LO} 12.5%"


def test_each_size_is_measured_on_the_decide_recipes_warm_start_at_that_rung(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(size_decide, "warm_start", lambda cfg, progress=True: seen.append(cfg) or
                        tmp_path / "key")
    monkeypatch.setattr(size_decide, "load_warm_start", lambda path, device: ("m", "t"))
    assert size_decide.decide_policy(HI) == ("m", "t", "key")
    assert seen == [rung(HI).warm("kk_knights")]
    assert size_decide.decide_policy("w192")[2] == "key" and seen[-1] == rung("w192").warm(
        "kk_knights")


def test_the_trend_over_four_rungs_is_reported_beside_the_two_size_verdict():
    names = [r.name for r in RUNGS[:4]]
    data = {n: {PART: {str(s): {"l1_rho": 0.9 - 0.05 * i + 0.001 * s} for s in (1, 2, 3)}}
            for i, n in enumerate(names)}
    r = decide_sizes(data, EFFECT)["L1 Spearman"]
    assert r["verdict"] == "SHRINKS" and r["trend"]["verdict"] == "SHRINKS"
    assert r["trend"]["rungs"] == names and r["trend"]["high"] < 0
    del data[names[1]][PART]["3"]                                    # 3 rungs with 3 seeds
    assert "trend" not in decide_sizes(data, EFFECT)["L1 Spearman"]
    assert "over 4 rungs SHRINKS" in size_decide.decide_table(
        {**data, names[1]: {PART: {str(s): {"l1_rho": 0.85} for s in (1, 2, 3)}}}, EFFECT)


def test_the_ladders_effects_measure_the_part_on_the_decide_warm_start(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    calls = []
    monkeypatch.setattr(size, "policy", lambda name, seed, progress=True: ("m", "t", "matched"))
    monkeypatch.setattr(size, "decide_policy", lambda name, progress=True: ("d", "t", "decide"))
    monkeypatch.setattr(size, "weights_fingerprint", lambda model: f"weights of {model}")
    monkeypatch.setattr(size, "MEASURE", {p: (lambda m, t, s, p=p: calls.append((p, s)) or {})
                                          for p in size.PARTS})
    size.measure_effects([LO, HI], parts=("tail", PART), seeds=(1,))
    size.measure_effects([LO, HI], parts=("tail", PART), seeds=(1,))       # stored: skipped
    assert calls == [("tail", 1), (PART, 1), ("tail", 1), (PART, 1)]
    data = size.read()
    assert {n: {p: data[n][p]["1"]["warm_key"] for p in ("tail", PART)} for n in (LO, HI)} == {
        n: {"tail": "matched", PART: "decide"} for n in (LO, HI)}
    assert {data[n][p]["1"]["weights"] for n in (LO, HI) for p in ("tail", PART)} == {
        "weights of m", "weights of d"}
