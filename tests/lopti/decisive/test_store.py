"""L1-L6 context: the stored decisiveness of the recipes (``tailtheory/lopti/decisive/store.py``):
its key, the share it reports, and a stale store refused."""

from __future__ import annotations

import math

import pytest

from provenance_check import check_named, two_policies
from tailtheory.core.measurements import StaleMeasurement
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.lopti.decisive import store as ds
from tests.lopti.decisive.test_report import _data


def test_config_keys_each_recipe_s_policies_and_the_calibration():
    learn, decide = ds.decisive_config("learn"), ds.decisive_config("decide")
    assert (learn["task"], decide["task"]) == ("kk_trace", "kk_knights")
    assert learn["tau"] == ds.cal.TAU and learn["K"] == ds.cal.K and learn["seeds"] == list(ds.SEEDS)
    assert decide["mid_step"] == 100 and learn["mid_step"] == 60
    with pytest.raises(ValueError, match="unknown recipe 'full'"):
        ds.decisive_config("full")


def test_decisive_share_below_the_floor_is_not_reported():
    shares = ds.decisive_share({"warm": _data(), "mid": _data()}, 8)
    assert set(shares) == {"warm", "mid"}
    w = shares["warm"]
    assert math.isnan(w["decisive_share"]) and (w["tokens"], w["prompts"]) == (4, 1)
    assert w["share_note"].startswith("not reportable: 4 tokens of 1 prompts")
    assert w["format_breaking"] == pytest.approx(0.25)
    assert w["token_frac"] == pytest.approx(4 / 24)


def _many(decisive: int, free: int, prompts: int) -> dict:
    """A policy's lowest bin of ``decisive`` tokens far above tau and ``free`` ones at 0, each
    with a small se, spread over ``prompts`` prompts (G = 8 rows each)."""
    toks = [{"seed": 1, "batch": 0, "row": 8 * (k % prompts), "t": k // prompts, "p": 0.1,
             "bin": 0, "adv": 1.0, "role": "fork", "weight": 1.0, "D": d, "D_se": 0.01,
             "gap": d, "gap_se": 0.01, "effect": d}
            for k, d in enumerate([ds.cal.TAU + 0.3] * decisive + [0.0] * free)]
    counts = {r: [0] * 4 for r in ("synonym", "order", "fork", "scaffold", "off_path", "junk")}
    return {"K": 64, "tokens": toks, "batches": [{"seed": 1, "batch": 0, "responses": 8 * prompts,
                                                  "count": [len(toks), 0, 0, 0],
                                                  "count_role": counts}]}


def test_decisive_share_above_the_floor_has_its_interval():
    v = ds.decisive_share({"warm": _many(120, 120, 48)}, 8)["warm"]
    assert (v["tokens"], v["prompts"]) == (240, 48)
    assert v["decisive_share"] == pytest.approx(0.5)
    assert "[" in v["share_note"] and "of 240 tokens of 48 prompts" in v["share_note"]
    # excess mean D: the decisive half's D less the noise expectation sqrt(2/pi) x 0.01
    assert v["excess_D"] == pytest.approx((ds.cal.TAU + 0.3) / 2 - math.sqrt(2 / math.pi) * 0.01)
    assert v["excess_D_low"] <= v["excess_D"] <= v["excess_D_high"]
    # 39 prompts: below the floor however many tokens
    assert math.isnan(ds.decisive_share({"warm": _many(150, 150, 39)}, 8)["warm"]["decisive_share"])


def test_a_missing_store_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    with pytest.raises(StaleMeasurement):
        ds.decisive_data("quick", "decide")


@pytest.mark.parametrize("recipe", ds.RECIPES)
def test_each_policy_names_its_start(monkeypatch, recipe):
    """Each policy's decisiveness names the recipe's warm start (the half-way policy's start)
    and the machine (the probe stubbed)."""
    warm, _ = two_policies(monkeypatch, ds)
    monkeypatch.setattr(ds, "measure_decisiveness", lambda *a, **kw: {"K": a[5], "tokens": [],
                                                                "batches": []})
    data = ds.measure_recipe(recipe, progress=False)
    assert set(data) == {"warm", "mid"}
    for entry in data.values():
        check_named(entry, weights_fingerprint(warm), machine())
