"""A study stored run by run (``tailtheory/experiments/incremental.py``): only finished runs are
stored, missing seeds are reported, a row of another config is refused, a later store extends."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tailtheory.core.measurements import StaleMeasurement
from tailtheory.experiments import incremental as inc
from tailtheory.engine.config import TrainConfig
from tailtheory.experiments.runs import run_key, runs_root
from tailtheory.experiments.study import Arm, Study


@pytest.fixture
def places(monkeypatch, tmp_path):
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))
    (tmp_path / "results").mkdir()
    return tmp_path


def _study(lr=1e-4):
    def arms(preset):
        base = TrainConfig(model="tiny", steps=3, lr=lr)
        return [Arm(label, tuple(replace(base, method=m, seed=s) for s in (0, 1, 2)),
                    {"method": m}) for label, m in (("GRPO", "grpo"), ("AR", "ar"))]

    return Study("demo_incremental", arms, measure_preset="quick")


def _finish(cfg, steps=3):
    """A finished run in the cache, as the trainer leaves it."""
    run = runs_root() / run_key(cfg)
    run.mkdir(parents=True)
    lines = [{"step": t, "reward/mean": 0.1 * t + 0.01 * cfg.seed, "rollout/len_mean": 5.0,
              "policy/entropy": 1.0, "eval/accuracy": None} for t in range(steps)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))


def test_stores_finished_runs_and_reports_the_missing_seeds(places):
    st = _study()
    grpo, ar = (a.configs for a in st.plan("quick"))
    _finish(grpo[0]), _finish(grpo[2]), _finish(ar[1])
    _finish(ar[0], steps=2)                                   # unfinished: not stored
    assert inc.store_done(st) == {"GRPO": 2, "AR": 1}
    m = inc.load_done(st)
    assert [r["seed"] for r in m["GRPO"]] == [0, 2] and [r["seed"] for r in m["AR"]] == [1]
    assert m.missing == {"GRPO": [1], "AR": [0, 2]}
    assert m["GRPO"][1]["final_reward"] == pytest.approx((0.0 + 0.1 + 0.2) / 3 + 0.02)
    # the record names where its runs ran (the learn preset names its recipe too)
    record = json.loads((places / "results" / "demo_incremental.json").read_text())
    assert record["regime"] == {"preset": "quick"}
    assert inc.regime("learn") == {"preset": "learn", "recipe": "learn"}


def test_a_later_store_keeps_rows_this_cache_lacks(places):
    import shutil

    st = _study()
    grpo = st.plan("quick")[0].configs
    _finish(grpo[0])
    inc.store_done(st)
    shutil.rmtree(runs_root())                                # another machine: empty cache
    _finish(grpo[1])
    assert inc.store_done(st) == {"GRPO": 2}
    assert inc.load_done(st).missing["GRPO"] == [2]


def test_a_row_stored_meanwhile_by_another_study_is_kept(places, monkeypatch):
    """Two studies on one store: B stores its run after A read its cache and before A writes;
    A's write merges what the file holds then, under the lock, so B's row stays."""
    st = _study()
    grpo = st.plan("quick")[0].configs
    _finish(grpo[0])                                          # A's cache
    real = inc.update_measurement

    def b_stores_first(name, build, command, regime=None):
        monkeypatch.setattr(inc, "update_measurement", real)
        monkeypatch.setenv("TAILTHEORY_CACHE", str(places / "cache_b"))
        _finish(grpo[1])                                      # B's cache: another run
        assert inc.store_done(st) == {"GRPO": 1}
        monkeypatch.setenv("TAILTHEORY_CACHE", str(places / "cache"))
        return real(name, build, command, regime)

    monkeypatch.setattr(inc, "update_measurement", b_stores_first)
    assert inc.store_done(st) == {"GRPO": 2}
    assert [r["seed"] for r in inc.load_done(st)["GRPO"]] == [0, 1]


def test_rows_of_another_config_are_refused(places):
    st = _study()
    _finish(st.plan("quick")[0].configs[0])
    inc.store_done(st)
    with pytest.raises(StaleMeasurement, match="arm 'GRPO' seed 0 was measured under another "
                                               "config; measure it again with: tailtheory study"):
        inc.load_done(_study(lr=3e-4))
    # a store under the new config drops the stale row (its run is another config's)
    assert inc.store_done(_study(lr=3e-4)) == {}


def test_nothing_stored_and_a_malformed_file_are_refused(places):
    st = _study()
    with pytest.raises(StaleMeasurement, match="no stored measurement"):
        inc.load_done(st)
    (places / "results" / "demo_incremental.json").write_text('{"data": {"GRPO": [1]}}')
    with pytest.raises(StaleMeasurement, match="is not a stored measurement"):
        inc.load_done(st)


def test_study_data_refuses_missing_seeds_naming_the_command(places):
    """One policy: a verdict never rests on part of its seeds; the error names the arm, the
    seeds and the command that trains them."""
    st = _study()
    with pytest.raises(StaleMeasurement, match="no stored measurement"):
        st.data("quick")                                      # nothing stored yet
    grpo, ar = (a.configs for a in st.plan("quick"))
    _finish(ar[2])
    inc.store_done(st)
    with pytest.raises(StaleMeasurement, match=r"lacks runs .*'GRPO': \[0, 1, 2\].*'AR': "
                                               r"\[0, 1\].*tailtheory study demo_incremental"):
        st.data("quick")
    for c in (*grpo, *ar[:2]):
        _finish(c)
    inc.store_done(st)
    m = st.data("quick")
    assert not m.missing and len(m["AR"]) == 3 and len(m["GRPO"]) == 3
    with pytest.raises(ValueError, match="profile must be one of"):
        st.data("slow")


def test_rows_a_worker_returned_are_stored_and_a_foreign_identity_is_dropped(places):
    """``store_rows``: the driver stores records it received (no run cache here); a row whose
    identity is not the one the code asks for its arm and seed is not stored."""
    st = _study()
    want = inc.study_identities(st, "quick")
    good = ({"seed": 1, "final_reward": 0.5}, want["GRPO"][1])
    foreign = ({"seed": 2, "final_reward": 0.9}, {**want["GRPO"][2], "lr": 0.5})
    assert inc.store_rows(st, "quick", {"GRPO": {1: good, 2: foreign}}) == {"GRPO": 1}
    record = inc.stored_record(st.name)
    assert record["data"]["GRPO"] == [good[0]] and record["config"]["GRPO"] == [good[1]]
