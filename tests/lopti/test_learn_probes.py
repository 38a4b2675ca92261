"""L4, L5 on the learning testbed (``tailtheory/lopti/learn_probes.py``): the stored
measurement's key, and the rule that combines the two policies (the worst of them)."""

from __future__ import annotations

import pytest

from provenance_check import check_named, two_policies
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.core.registry import Evidence, Verdict
from tailtheory.lopti import learn_probes as lp
from tailtheory.lopti.measurement import PROBE_SIZES


def test_probe_config_is_the_learn_preset_with_both_policies():
    c = lp.probe_config()
    assert c["seeds"] == list(PROBE_SIZES["learn"]["seeds"]) and c["batches"] == 4
    assert c["prompts_per_step"] == 32 and c["group_size"] == 8 and c["rollout"] == "exact"
    assert c["policies"] == ["warm", "mid"] and c["mid_step"] == 60


def test_probe_config_of_the_matched_recipe_keys_its_own_task_and_warm_start():
    learn, matched = lp.probe_config("learn"), lp.probe_config("matched")
    assert (learn["task"], matched["task"]) == ("kk_trace", "kk_prose")
    assert learn["warm_start"] != matched["warm_start"]
    assert {k: v for k, v in learn.items() if k not in ("task", "warm_start")} == {
        k: v for k, v in matched.items() if k not in ("task", "warm_start")}
    with pytest.raises(ValueError, match="unknown recipe 'full' for the probes; valid: learn, "
                                         "matched, decide"):
        lp.probe_config("full")


@pytest.mark.parametrize("warm, mid, expected", [
    (Verdict.TOY_SCALE, Verdict.TOY_SCALE, Verdict.TOY_SCALE),
    (Verdict.TOY_SCALE, Verdict.NOT_REPRODUCED, Verdict.NOT_REPRODUCED),
    (Verdict.REFUTED, Verdict.TOY_SCALE, Verdict.REFUTED),
])
def test_both_policies_take_the_worst(warm, mid, expected):
    verdicts = {"W": warm, "M": mid}
    ev = lp._both(lambda part: Evidence(verdicts[part], {"x": 1.0}, "rule"),
                  {"warm": "W", "mid": "M"})
    assert ev.verdict == expected
    assert ev.numbers["warm:x"] == 1.0 and ev.numbers["mid:verdict"] == str(mid)
    assert "step 60" in ev.note


@pytest.mark.parametrize("recipe", lp.RECIPES)
def test_each_policy_names_its_start(monkeypatch, recipe):
    """Each policy's probes name the recipe's warm start (the half-way policy's start) and the
    machine (the one-step measurement stubbed)."""
    warm, _ = two_policies(monkeypatch, lp)
    monkeypatch.setattr(lp, "measure", lambda m, task, cfg, seeds, batches, progress=True: {
        "seeds": list(seeds), "batches": []})
    data = lp.measure_learn_probes(progress=False, recipe=recipe)
    assert set(data) == {"warm", "mid"}
    for entry in data.values():
        check_named(entry, weights_fingerprint(warm), machine())
