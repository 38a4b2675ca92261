"""The regime probe (``tailtheory/regime/measure.py``): end to end on a tiny model, the chunked
pruned mass against the obvious code, sizes, and the stored measurement's errors."""

import pytest
import torch

from provenance_check import check_named, tiny_model
from tailtheory.core.measurements import StaleMeasurement
from tailtheory.core.provenance import cpu_model, weights_fingerprint
from tailtheory.experiments import policies
from tailtheory.engine.config import TrainConfig
from tailtheory.engine import load
from tailtheory.engine.load import load_model
from tailtheory.regime import measure as rm
from tailtheory.regime.quantities import PATHS, RHOS

from tests.lopti.test_measurement import DenseKK


def tiny():
    cfg = TrainConfig(task="kk", model="tiny", n_people=2, prompts_per_step=2, group_size=3,
                      method="grpo")
    task = DenseKK()
    return load_model(cfg, task), task, cfg


@pytest.mark.usefixtures("one_thread")
def test_probe_end_to_end_on_a_tiny_model():
    model, task, cfg = tiny()
    prov = {"start": None, "weights": "x", "cpu": "y"}
    rows = rm.measure_policy(model, task, cfg, seeds=(0, 1), batches=2, provenance=prov,
                             progress=False)
    assert [(r["seed"], r["batch"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in rows:
        B = cfg.prompts_per_step * cfg.group_size
        assert len(r["len"]) == len(r["reward"]) == B and sum(r["len"]) == r["tokens"]
        assert sum(r["count"]) == r["tokens"] and all(a >= 0 for a in r["adv_abs_sum"])
        pruned = [r["pruned_sum"][str(rho)] for rho in RHOS]
        assert all(0 <= a <= b <= r["tokens"] for a, b in zip(pruned, pruned[1:]))  # rises in rho
        for path in PATHS:
            assert r[f"k3_sum:{path}"] >= 0 and r[f"responses:{path}"] == B
        assert r["provenance"] == prov and r["cpu_seconds"] >= 0
    again = rm.measure_policy(model, task, cfg, seeds=(0, 1), batches=2, provenance=prov,
                              progress=False)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "cpu_seconds"} for r in rs]  # noqa
    assert strip(again) == strip(rows)  # seeded: the same batches, the same numbers


@pytest.mark.usefixtures("one_thread")
def test_pruned_sums_equal_the_obvious_code():
    """Chunked, one log-softmax swept over rho (STYLE 6): against ``safe_vocab_mask`` and
    ``token_stats``'s pruned mass, position by position."""
    from tailtheory.core.safeset import safe_vocab_mask
    from tailtheory.core.stats import token_stats
    from tailtheory.engine.policy_forward import response_logits
    from tailtheory.engine.rollout.engine import RolloutEngine
    from tailtheory.engine.trainer import rollout_config, rollout_step

    model, task, cfg = tiny()
    model.lm_head.weight.data *= 8  # a sharper head: something to prune at every rho
    engine = RolloutEngine(model, rollout_config(cfg, task))
    _, rb, _ = rollout_step(0, cfg, task, model, engine, torch.Generator().manual_seed(0))
    fast = rm.pruned_sums(model, rb, rows=2)
    with torch.no_grad():
        z = response_logits(model, rb).double()
    slow = [float((token_stats(z, rb.response, keep=safe_vocab_mask(z, "min_p", rho))
                   ["pruned_mass"] * rb.mask).sum()) for rho in RHOS]
    assert fast == pytest.approx(slow, rel=1e-10, abs=1e-12)
    assert slow[-1] > 0


def test_config_names_the_recipe_and_its_half_way_step():
    c = rm.regime_config("learn")
    assert c["recipe"] == "learn" and c["mid_step"] == 60 and c["fields"]["task"] == "kk_trace"
    assert c["rhos"] == list(RHOS) and c["paths"] == list(PATHS)


def test_unknown_recipe_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown recipe 'nope'; valid recipes: .*learn"):
        rm.regime_data("nope")


def test_missing_measurement_names_its_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    with pytest.raises(StaleMeasurement, match="measure it with: tailtheory measure "
                       "regime_learn"):
        rm.regime_data("learn")


def test_rows_carry_the_warm_starts_provenance(monkeypatch):
    """Both policies' rows carry the recipe's warm start (the half-way policy's start) and the
    CPU in their ``provenance`` (the policies tiny models, the probe's rows stubbed: that
    :func:`measure_policy` puts the provenance it is given into each row is tested above)."""
    warm, mid = tiny_model(0), tiny_model(1)
    monkeypatch.setattr(load, "load_start", lambda cfg: (warm, None))
    monkeypatch.setattr(policies, "mid_policy", lambda progress, cfg, step: (mid, None))
    monkeypatch.setattr(rm, "measure_policy", lambda model, task, cfg, provenance, progress:
                        [{"seed": 0, "provenance": provenance}])
    out = rm.measure_regime("learn", progress=False)
    assert set(out) == set(rm.POLICIES)
    for rows in out.values():
        check_named(rows, weights_fingerprint(warm), cpu_model())
