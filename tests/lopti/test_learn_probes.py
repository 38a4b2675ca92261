"""L4, L5 on the learning testbed (``tailtheory/lopti/learn_probes.py``): the stored
measurement's key, and the rule that combines the two policies (the worst of them)."""

from __future__ import annotations

import pytest

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.lopti import learn_probes as lp
from tailtheory.lopti.measurement import PROBE_SIZES


def test_probe_config_is_the_learn_preset_with_both_policies():
    c = lp.probe_config()
    assert c["seeds"] == list(PROBE_SIZES["learn"]["seeds"]) and c["batches"] == 4
    assert c["prompts_per_step"] == 32 and c["group_size"] == 8 and c["rollout"] == "exact"
    assert c["policies"] == ["warm", "mid"] and c["mid_step"] == 60


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
