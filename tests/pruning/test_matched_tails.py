"""Tests of ``tailtheory.pruning.matched_tails``: P4 on the matched recipe's policies. The
measurement itself (minutes) is stored in ``results/p4_matched.json``; its pipeline is
``trained_tails.rollout_setting``, tested in ``test_trained_tails.py`` with the stored-measurement
rule of both stores."""

import pytest

from provenance_check import check_named, two_policies
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.pruning import matched_tails as mt
from tailtheory.pruning import trained_tails as tr
from tests.pruning.test_trained_tails import NO_PROMPTS, fake_matched_data


def test_trained_knees_of_the_matched_settings():
    k = tr.trained_knees(fake_matched_data(), 1e-3, mt.MATCHED_SETTINGS)
    assert set(k) == set(mt.MATCHED_SETTINGS)
    assert k["matched_warm"]["tok_abs_mean_left"] == pytest.approx(0.3)


def test_matched_identity_names_the_probed_policies():
    ident = mt.p4_matched_identity()
    assert ident["task"] == "kk_prose" and ident["mid_step"] == 60 and len(ident["mid_run"]) == 16


def test_each_policy_names_its_start(monkeypatch):
    """Each policy's setting names the matched recipe's warm start (the half-way policy's
    start) and the machine (the rollouts stubbed)."""
    warm, _ = two_policies(monkeypatch, mt, NO_PROMPTS)
    monkeypatch.setattr(mt, "rollout_setting", lambda *a: {"sweep": []})
    data = mt.measure_matched()
    assert set(data["settings"]) == set(mt.MATCHED_SETTINGS)
    for entry in data["settings"].values():
        check_named(entry, weights_fingerprint(warm), machine())
