"""The model-size ladder's per-rung effects (``tailtheory/ladder/effects.py``; L1, L4, L5, M7, V2,
P4 against size): each part's numbers on a tiny model, the fixed bins of ``1 - p`` by hand,
storing per (rung, part, seed) and skipping what is stored, the seeds' warm starts, and the
trend verdicts on data built to reach each one. Tests use no rung above the base."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from provenance_check import check_named
from tailtheory.core.models import tiny_lm
from tailtheory.core.provenance import MixedStarts, weights_fingerprint
from tailtheory.engine.start.rungs import RUNGS
from tailtheory.engine.tasks.task import get_task
from tailtheory.ladder.build import store_rung
from tailtheory.experiments.policies import grpo_config
from tailtheory.ladder import effects as size


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(size, "PROMPTS", 6)
    monkeypatch.setattr(size, "WINDOWS", (4, 12))
    model = tiny_lm(vocab_size=512, hidden=32, layers=1, heads=2, kv_heads=1, seed=0)
    return model, get_task("kk", n_people=2)


def test_q_bins_by_hand():
    q = torch.tensor([5e-5, 1e-4, 5e-4, 1e-3, 0.05, 0.1, 0.5, 1.0])
    d = torch.tensor([9.0, 1.0, 3.0, 2.0, -4.0, 5.0, -7.0, 9.0])
    bins = size.q_bins(d, q)
    assert [b["tokens"] for b in bins] == [2, 1, 1, 3]                 # 5e-5 is in no bin
    assert [b["mean_abs"] for b in bins] == [2.0, 2.0, 4.0, 7.0]
    assert size.q_bins(d[:1], q[:1])[0]["tokens"] == 0 and math.isnan(
        size.q_bins(d[:1], q[:1])[0]["mean_abs"])


def test_policy_facts_by_hand():
    p = torch.tensor([0.1, 0.25, 0.3, 0.8, 0.9, 1.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]]).bool()
    f = size.policy_facts(p, torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 0.0]), mask)
    assert f["bin_fractions"] == pytest.approx([2 / 6, 1 / 6, 0.0, 3 / 6])
    assert f["entropy"] == pytest.approx(1.0) and f["length"] == 3.0


def test_tail_numbers_on_a_tiny_model(tiny):
    out = size.tail_numbers(*tiny, seed=1)
    assert set(out["paths"]) == set(size.TAIL_PATHS)
    for path, x in out["paths"].items():
        assert x["tokens"] > 0 and x["k3"] >= 0 and x["max_abs"] >= x["mean_abs"] >= 0
        assert sum(b["tokens"] for b in x["bins"]) <= x["tokens"]
    assert out["paths"]["kv"]["mean_abs"] < out["paths"]["bf16"]["mean_abs"]   # float32 noise
    assert out["m7_slope"] == out["paths"]["bf16"]["envelope_slope"] or math.isnan(out["m7_slope"])
    facts = out["policy"]
    assert len(facts["bin_fractions"]) == 4 and sum(facts["bin_fractions"]) == pytest.approx(1)
    assert facts["entropy"] > 0 and facts["length"] > 0
    low = out["paths"]["bf16"]["bins"][-1]["mean_abs"]
    assert out["v2_low"] == pytest.approx(math.log10(low))


def test_p4_and_lopti_numbers_on_a_tiny_model(tiny):
    p4 = size.p4_numbers(*tiny, seed=1)
    assert 0.0 <= p4["p4_removed"] <= 1.0 and p4["knee"]["mass_mean"] <= 1e-3
    cfg = replace(grpo_config("learn"), prompts_per_step=2, group_size=2)
    lo = size.lopti_numbers(*tiny, seed=1, batches=1, cfg=cfg)
    assert {k for _, k, _ in size.EFFECTS.values() if k.startswith(("l1", "l4", "l5"))} == set(lo)


def test_effects_are_stored_per_seed_and_never_measured_twice(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    calls = []
    monkeypatch.setattr(size, "policy", lambda name, seed, progress=True: (*tiny, "key"))
    monkeypatch.setattr(size, "MEASURE", {p: (lambda m, t, s, p=p: calls.append((p, s)) or
                                              {"v2_low": float(s)}) for p in size.PARTS})
    monkeypatch.setattr(size, "cpu_model", lambda: "cpu")
    size.measure_effects(["base"], parts=("tail",), seeds=(1, 2))
    size.measure_effects(["base"], parts=("tail", "p4"), seeds=(1, 2))
    assert calls == [("tail", 1), ("tail", 2), ("p4", 1), ("p4", 2)]
    data = size.read()
    assert set(data) == {"base"} and set(data["base"]) == {"tail", "p4"}
    row = data["base"]["tail"]["2"]
    assert {k: row[k] for k in ("v2_low", "warm_key", "cpu")} == {"v2_low": 2.0, "warm_key": "key",
                                                                  "cpu": "cpu"}
    assert set(row) == {"v2_low", "warm_key", "weights", "cpu", "seconds", "threads"}
    assert row["weights"] == weights_fingerprint(tiny[0])
    check_named(row, weights_fingerprint(tiny[0]), "cpu")        # as `measure list` reads it
    assert 0.0 <= row["seconds"] < 60 and row["threads"] == 1
    with pytest.raises(ValueError, match="unknown part"):
        size.measure_effects(["base"], parts=("gradients",))


def test_a_rung_never_mixes_two_models_under_one_warm_start(tmp_path, monkeypatch, tiny):
    """A warm start rebuilt on another CPU is another model under the same key: a new seed or
    part measured on it beside the stored rows is refused, naming both fingerprints; another
    key (an independent seed's warm start) and rows stored without a fingerprint are not."""
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    other = tiny_lm(vocab_size=512, hidden=32, layers=1, heads=2, kv_heads=1, seed=1)
    models = {"key": tiny[0]}
    monkeypatch.setattr(size, "policy", lambda name, seed, progress=True:
                        (models[f"key{seed}" if f"key{seed}" in models else "key"], tiny[1],
                         f"key{seed}" if f"key{seed}" in models else "key"))
    monkeypatch.setattr(size, "MEASURE", {p: (lambda m, t, s: {"v2_low": 0.0})
                                          for p in size.PARTS})
    size.measure_effects(["base"], parts=("tail",), seeds=(1,))
    models["key"] = other                                  # the same key, rebuilt elsewhere
    with pytest.raises(MixedStarts, match=weights_fingerprint(other)) as err:
        size.measure_effects(["base"], parts=("p4",), seeds=(2,))
    assert weights_fingerprint(tiny[0]) in str(err.value) and "p4" not in size.read()["base"]
    models["key3"] = other                                 # an independent seed: its own key
    size.measure_effects(["base"], parts=("p4",), seeds=(3,))
    stored = size.read()
    for row in stored["base"]["tail"].values():            # rows stored before fingerprints
        del row["weights"]
    store_rung(size.STORE, "base", stored["base"], {}, "test")
    size.measure_effects(["base"], parts=("p4",), seeds=(2,))
    assert set(size.read()["base"]["p4"]) == {"2", "3"}


def test_a_rung_not_built_names_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    with pytest.raises(ValueError, match="tailtheory ladder build --rung w192"):
        size.policy("w192", 1)


def test_independent_warm_starts_at_the_base_and_top_rungs(monkeypatch):
    assert size.independent(RUNGS[0].name) and size.independent(RUNGS[-1].name)
    assert not any(size.independent(r.name) for r in RUNGS[1:-1])
    seen = []

    def warm_start(cfg, progress=True):
        seen.append(cfg.seed)
        raise LookupError
    monkeypatch.setattr(size, "require_built", lambda *a: None)
    monkeypatch.setattr(size, "warm_start", warm_start)
    for name in (RUNGS[0].name, RUNGS[1].name):
        for seed in size.SEEDS:
            with pytest.raises(LookupError):
                size.policy(name, seed)
    assert seen == [0, 1, 2, 0, 0, 0]


def _data(values_by_rung: dict, key: str = "v2_low", part: str = "tail") -> dict:
    return {name: {part: {str(s): {key: v} for s, v in enumerate(vals, 1)}}
            for name, vals in values_by_rung.items()}


@pytest.fixture
def built(monkeypatch):
    rows = {r.name: {"non_embedding_params": p} for r, p in
            zip(RUNGS, (1e6, 1e7, 1e8, 1e9, 1e10))}
    monkeypatch.setattr(size, "stored", lambda: rows)
    return rows


@pytest.mark.parametrize("rule, verdict", [
    (lambda i: 0.2 * i, "GROWS"), (lambda i: -0.2 * i, "SHRINKS"), (lambda i: 0.002 * (-1) ** i, "FLAT")])
def test_trend_verdicts_on_built_data(built, rule, verdict):
    names = [r.name for r in RUNGS[:4]]
    data = _data({n: [rule(i) + d for d in (-0.001, 0.0, 0.001)] for i, n in enumerate(names)})
    t = size.trends(data)["V2 low-p"]
    assert t["verdict"] == verdict and len(t["rungs"]) == 4 and t["delta"] == 0.05
    assert verdict in size.trend_table(data)


def test_a_trend_needs_four_rungs_with_three_seeds(built):
    names = [r.name for r in RUNGS]
    data = _data({names[0]: [1, 2, 3], names[1]: [1, 2, 3], names[2]: [1, 2, 3],
                  names[3]: [1, 2]})                                   # the fourth has 2 seeds
    t = size.trends(data)["V2 low-p"]
    assert t["verdict"] == "PENDING (3 of 4 rungs measured)" and "slope" not in t
    assert t["partial"] == [{"rung": names[3], "values": [1, 2]}]    # shown, not in the trend
    assert f"; {names[3]} 1, 2 (2 of 3 seeds, not in the trend)" in size.trend_table(data)
    assert size.trends({})["L1 Spearman"]["verdict"].startswith("PENDING (0 of 4")


def test_the_report_prints_each_verdict_and_with_costs_the_parts_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    for i, r in enumerate(RUNGS[:4]):
        store_rung("batch_shape_ladder", r.name, [
            {"decoder": "hf", "dtype": "bf16", "batch": 32, "over_1e3": 0.01 * i + 0.001 * (-1) ** i,
             "non_embedding_params": 10 ** (6 + i)}], {}, "test")
    from tailtheory.ladder.report import size_report

    report = size_report()
    assert "V8 (hf bf16 batch 32, |Delta| > 1e-3) GROWS" in report and "V7" in report
    assert "L1 Spearman PENDING" in report and "CPU-minutes" not in report
    assert report.index("Trend family over builds") < report.index("Superseded")
    store_rung("ladder_effects", "base", {"tail": {"1": {"seconds": 90.0}, "2": {"seconds": 150.0},
                                                  "3": {}, "4": {"seconds": 3000.0}}}, {}, "test")
    assert size_report(costs=True).endswith(  # the median: one crowded seed does not set it
        "CPU-minutes a seed of each part (seeds timed): base tail 2.5 (3)")
    assert size.part_seconds({}).endswith("none timed")


def test_decisive_numbers_on_a_tiny_model_and_per_rung(tiny):
    cfg = replace(grpo_config("learn"), prompts_per_step=2, group_size=2)
    d = size.decisive_numbers(*tiny, seed=1, cfg=cfg, prompts=1)
    assert {"token_frac", "decisive_share", "helps", "hurts", "format_breaking", "excess_D",
            "tokens", "prompts", "share_note"} <= set(d)
    assert 0.0 <= d["token_frac"] <= 1.0
    # one prompt's tokens: below the reporting floor, so no share, the counts said
    assert d["decisive_share"] != d["decisive_share"] and "not reportable" in d["share_note"]
    stored = {"base": {"decisive": {"1": {"decisive_share": 0.1, "token_frac": 0.2},
                                    "2": {"decisive_share": 0.3, "token_frac": 0.4}}},
              "w192": {"tail": {"1": {}}}}
    by = size.decisive_by_rung(stored)
    assert set(by) == {"base"} and by["base"]["seeds"] == 2
    assert by["base"]["decisive_share"] == pytest.approx(0.2)



def test_facts_per_rung_are_seed_means():
    stored = {"base": {"step": {"1": {"tokens_per_s": 100.0, "update_peak_share": 0.2},
                                "2": {"tokens_per_s": 300.0, "update_peak_share": 0.4}}}}
    out = size.by_rung("step", ("tokens_per_s", "update_peak_share"), stored)
    assert out == {"base": {"tokens_per_s": 200.0, "update_peak_share": pytest.approx(0.3),
                            "seeds": 2}}
    assert size.by_rung("decisive", ("decisive_share",), stored) == {}
