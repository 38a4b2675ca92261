"""L1-L6 context: the stored decisiveness of the recipes (``tailtheory/lopti/decisive/store.py``):
its key, the share it reports, and a stale store refused."""

from __future__ import annotations

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


def test_decisive_share_reads_the_lowest_bin_of_each_policy():
    shares = ds.decisive_share({"warm": _data(), "mid": _data()})
    assert set(shares) == {"warm", "mid"}
    # the hand-written batch: 2 of its 4 lowest-bin tokens reach tau when tau <= 0.2
    expected = 0.5 if ds.cal.TAU <= 0.2 else 0.25 if ds.cal.TAU <= 0.3 else 0.0
    assert shares["warm"]["decisive_share"] == pytest.approx(expected)
    assert shares["warm"]["format_breaking"] == pytest.approx(0.25)


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
