"""The design search's decisiveness gate (``tailtheory/lopti/decisive/gate.py``): its key, the
rule on both policies, a design's policies and the refusal when no design is chosen."""

from __future__ import annotations

import pytest

from provenance_check import check_named, tiny_model
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.lopti.decisive import gate
from tests.lopti.decisive.test_store import _many


def test_config_names_the_probe_and_the_seed():
    c = gate.gate_config()
    assert c["sampler"] == "coupled" and c["gate_seed"] == gate.GATE_SEED
    assert c["policies"] == ["warm", "mid"] and c["tau"] == gate.cal.TAU


def _entry(decisive_warm=120, decisive_mid=120):
    return {"warm": _many(decisive_warm, 240 - decisive_warm, 48),
            "mid": _many(decisive_mid, 240 - decisive_mid, 48)}


def test_gate_needs_both_numbers_on_both_policies():
    # every probed token is in the lowest bin (token share 1.0); excess mean D about
    # share x (tau + 0.3)
    high = gate.gate_verdict(_entry(), matched_excess=0.01, group_size=8)
    assert high["passes"] and high["need_excess_D_low"] == pytest.approx(0.03)
    # the half-way policy's excess D below 3x matched's: fails
    low = gate.gate_verdict(_entry(decisive_mid=2), matched_excess=0.01, group_size=8)
    assert not low["passes"] and low["policies"]["warm"]["excess_D_low"] >= 0.03
    with pytest.raises(ValueError, match="missing"):
        gate.gate_verdict({"warm": _entry()["warm"]}, 0.01, 8)


def test_gate_reads_the_token_share():
    e = _entry()
    e["mid"]["batches"][0]["count"] = [240, 0, 0, 10_000]      # 2.3% of tokens in the bin
    assert not gate.gate_verdict(e, 0.0, 8)["passes"]


def test_policies_of_a_design(monkeypatch):
    calls = []
    monkeypatch.setattr(gate, "load_start", lambda cfg: calls.append(("warm", cfg)) or "w")
    monkeypatch.setattr(gate, "mid_policy",
                        lambda progress, cfg, step: calls.append(("mid", cfg, step)) or "m")
    assert gate.design_policy("g16", "warm") == "w"
    assert gate.design_policy("g16", "mid", progress=False) == "m"
    _, cfg, step = calls[1]
    assert (cfg.group_size, cfg.seed, cfg.device, step) == (16, gate.GATE_SEED, "cpu", 100)
    with pytest.raises(ValueError, match="unknown policy"):
        gate.design_policy("g16", "late")


def test_nothing_to_gate_before_a_design_learns(monkeypatch):
    monkeypatch.setattr(gate, "load_done", lambda study: {})
    monkeypatch.setattr(gate, "design_table", lambda data: [])
    monkeypatch.setattr(gate, "matched_excess", lambda: 0.0)
    with pytest.raises(ValueError, match="no design to gate"):
        gate.measure_chosen(progress=False)


def test_each_policy_of_a_design_names_its_start(tmp_path, monkeypatch):
    """The gate's rows name the design's warm start (the half-way policy by the start it was
    trained from) and the machine; each policy stored as it finishes and never measured twice
    (the policies and the probe stubbed)."""
    warm, mid = tiny_model(0), tiny_model(1)
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    monkeypatch.setattr(gate, "load_start", lambda cfg: (warm, None))
    monkeypatch.setattr(gate, "design_policy",
                        lambda name, policy, progress=True: (warm if policy == "warm" else mid,
                                                             None))
    probed = []
    monkeypatch.setattr(gate, "measure_decisiveness",
                        lambda *a, **kw: probed.append(a[0]) or {"K": a[5], "tokens": [],
                                                                 "batches": []})
    entry = gate.measure_gate("people2", progress=False)
    assert set(entry) == {"warm", "mid"} and len(probed) == 2
    for e in entry.values():
        check_named(e, weights_fingerprint(warm), machine())
    gate.measure_gate("people2", progress=False)
    assert len(probed) == 2                                  # stored: not measured again
