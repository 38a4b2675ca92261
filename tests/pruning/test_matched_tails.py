"""Tests of ``tailtheory.pruning.matched_tails``: P4 on the matched recipe's policies. The
measurement itself (minutes) is stored in ``results/p4_matched.json``; its pipeline is
``trained_tails.rollout_setting``, tested in ``test_trained_tails.py`` with the stored-measurement
rule of both stores."""

import pytest

from tailtheory.pruning import matched_tails as mt
from tailtheory.pruning import trained_tails as tr
from tests.pruning.test_trained_tails import fake_matched_data


def test_trained_knees_of_the_matched_settings():
    k = tr.trained_knees(fake_matched_data(), 1e-3, mt.MATCHED_SETTINGS)
    assert set(k) == set(mt.MATCHED_SETTINGS)
    assert k["matched_warm"]["tok_abs_mean_left"] == pytest.approx(0.3)


def test_matched_identity_names_the_probed_policies():
    ident = mt.p4_matched_identity()
    assert ident["task"] == "kk_prose" and ident["mid_step"] == 60 and len(ident["mid_run"]) == 16
