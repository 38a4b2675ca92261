"""The stored one-step measurement (tailtheory.lopti.measurement): claims L1, L4, L5.

Pooling, verdicts and the stored measurement are checked on hand-made numbers; the measurement
runs end to end on a tiny model.
"""

import numpy as np
import pytest

from provenance_check import check_named, tiny_model
from tailtheory.core.measurements import StaleMeasurement, save_measurement
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.core.registry import Verdict
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.tasks.task import Reward, get_task
from tailtheory.engine.load import load_model
from tailtheory.experiments import presets
from tailtheory.lopti import measurement as ms
from tailtheory.lopti.onestep import METHODS, SGD_LR
from tailtheory.lopti.probes import N_BINS


# ---- hand-made measurements: pooling and verdicts --------------------------------------------

def fake_batch(seed: int, batch: int, norm_bins, rise_top: dict, dpi_scale=(1.0, 0.1),
               rho_sign: float = 1.0) -> dict:
    """A stored batch with 10 tokens per bin, 5 with A > 0 and 5 with A < 0; the A > 0 tokens
    of the top bin rose ``5 * rise_top[m]`` times; Delta pi per bin is ``(4 - b) * 1e-3``
    (times ``dpi_scale`` for lowest / highest); L1 norms are ``(1 - p) ** rho_sign``."""
    base = [(N_BINS - b) * 1e-3 for b in range(N_BINS)]
    sums = lambda k, s: {"pos": [5 * k * x for x in s], "neg": [-5 * k * x for x in s]}  # noqa
    p = [0.1, 0.4, 0.6, 0.9, 0.2, 0.3, 0.7, 0.99]
    return {"seed": seed, "batch": batch, "tokens": 10 * N_BINS, "count": [10.0] * N_BINS,
            "count_pos": [5.0] * N_BINS, "count_neg": [5.0] * N_BINS,
            "adv_sum_pos": [5.0] * N_BINS, "adv_sum_neg": [-5.0] * N_BINS,
            "norm_all": 1.0, "norm_bins": list(norm_bins),
            "dpi_sum": {"all": sums(1, base), "lowest": sums(dpi_scale[0], base),
                        "highest": sums(dpi_scale[1], base)},
            "rise": {m: [2.5, 2.5, 2.5, 5 * rise_top[m]] for m in METHODS},
            "l1": {"p": p, "param_norm": [(1 - x) ** rho_sign for x in p],
                   "logit_norm": [1 - x for x in p]}}


def fake_data(jitter=(0.0, 0.2, 0.4), **kw) -> dict:
    rise = lambda j: {"GRPO": 0.5 + j / 10, "AR": 0.7 + j / 10, "Lopti": 0.4 + j / 10}  # noqa
    norms = lambda j: [0.7 + j / 10, 0.4 + j / 10, 0.2 + j / 10, 0.1 + j / 10]  # noqa
    batches = [fake_batch(s, i, norms(j), rise(j), **kw) for s, j in enumerate(jitter)
               for i in range(2)]
    return {"seeds": list(range(len(jitter))), "batches": batches}


def test_seed_values_pool_hand_made_numbers():
    sv = ms.seed_values(fake_data())
    assert np.allclose(sv[0]["frac"], 0.25) and np.allclose(sv[1]["adv_pos"], 1.0)
    assert np.allclose(sv[2]["norm_bins"], [0.74, 0.44, 0.24, 0.14])
    assert np.allclose(sv[0]["dpi"]["all"]["pos"], [4e-3, 3e-3, 2e-3, 1e-3])
    assert np.allclose(sv[1]["rise"]["AR"], [0.5, 0.5, 0.5, 0.72])
    assert sv[0]["l1"]["rho"] == pytest.approx(1.0) and sv[0]["l1"]["slope"] == pytest.approx(1.0)


def test_verdicts_on_hand_made_numbers_L1_L4_L5():
    """Seeds differ by a common shift, so every difference has se 0 (or a known se)."""
    data = fake_data()
    assert ms.l1_evidence(data).verdict == Verdict.TOY_SCALE
    assert ms.l1_evidence(fake_data(rho_sign=-1.0)).verdict == Verdict.REFUTED
    e4 = ms.l4_evidence(data)
    assert e4.verdict == Verdict.TOY_SCALE and e4.numbers["f_rel_size"] == pytest.approx(0.1)
    assert e4.numbers["e_rel_dist"] == pytest.approx(0.0)
    assert ms.l4_evidence(fake_data(dpi_scale=(0.0, 2.0))).verdict == Verdict.REFUTED
    e5 = ms.l5_evidence(data)  # AR +0.2 over GRPO, Lopti -0.1: one part refuted
    assert e5.numbers["delta_AR"] == pytest.approx(0.2) and e5.verdict == Verdict.REFUTED
    assert e5.numbers["rise_top_GRPO"] == pytest.approx(0.52)


# ---- bad input and the stored measurement ---------------------------------------------------

def test_bad_preset_and_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="unknown preset"):
        ms.measure_probes("medium")
    with pytest.raises(ValueError, match="unknown preset"):
        ms.notebook_probe_data("thorough")
    with pytest.raises(ValueError, match=">= 2 distinct seeds"):
        ms.measure_probes("quick", seeds=(0,))
    with pytest.raises(ValueError, match=">= 2 distinct seeds"):
        ms.measure_probes("quick", seeds=(3, 3))
    with pytest.raises(ValueError, match="seeds must be"):
        ms.measure_probes("quick", seeds=(0, -1))
    with pytest.raises(ValueError, match="batches"):
        ms.measure_probes("quick", batches=0)
    with pytest.raises(ValueError, match=">= 2 seeds"):
        ms.l4_evidence({"seeds": [0], "batches": fake_data()["batches"][:1]})


class DenseKK:
    """``kk`` (2 people) with a dense reward: the first response token id mod 3, so groups of
    a random model rarely tie and the advantages are non-zero."""

    def __init__(self):
        self._task = get_task("kk", seed=0, n_people=2)

    def __getattr__(self, name):
        return getattr(self._task, name)

    def reward(self, problem, response_ids) -> Reward:
        return Reward(float(int(response_ids[0]) % 3), False, True)


def tiny_config() -> TrainConfig:
    return TrainConfig(task="kk", model="tiny", n_people=2, prompts_per_step=2, group_size=3,
                       method="grpo")


def test_measure_end_to_end_on_a_tiny_model():
    cfg, task = tiny_config(), DenseKK()
    model = load_model(cfg, task)
    data = ms.measure(model, task, cfg, seeds=(0, 1), batches=1, progress=False)
    assert data["seeds"] == [0, 1] and [r["seed"] for r in data["batches"]] == [0, 1]
    assert all(r["norm_all"] > 0 for r in data["batches"])
    again = ms.measure(model, task, cfg, seeds=(0, 1), batches=1, progress=False)
    assert again == data  # seeded: the same batches, the same numbers
    with pytest.raises(ValueError, match=">= 2 distinct seeds"):
        ms.measure(model, task, cfg, seeds=[0], batches=1)


def test_stored_measurement_round_trip_and_stale_one_refused(tmp_path, monkeypatch):
    from tailtheory.core.registry import all_claims

    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    with pytest.raises(StaleMeasurement, match="no stored measurement"):
        ms.probe_data("quick")
    data = fake_data()
    save_measurement("lopti_probes", ms.probe_config("full"), data, ms.COMMAND)
    assert ms.probe_data("quick") == data
    from tailtheory.lopti import learn_probes

    for recipe in learn_probes.RECIPES:
        save_measurement(f"lopti_probes_{recipe}", learn_probes.probe_config(recipe),
                         {"warm": data, "mid": data}, learn_probes.COMMAND)
    assert all_claims()["L4"].check("quick").verdict == Verdict.TOY_SCALE
    stale = {**ms.probe_config("full"), "lr": 2 * SGD_LR}
    save_measurement("lopti_probes", stale, data, ms.COMMAND)
    with pytest.raises(StaleMeasurement, match="another config"):
        ms.probe_data("quick")


def test_seed_effects_are_the_evidence_numbers_seed_by_seed():
    """The ladder's per-seed effects (``seed_effects``) average to the evidence's own numbers."""
    data = fake_data()
    eff = ms.seed_effects(data)
    assert set(eff) == set(data["seeds"])
    mean = lambda k: float(np.mean([e[k] for e in eff.values()]))  # noqa: E731
    l4, l5 = ms.l4_evidence(data).numbers, ms.l5_evidence(data).numbers
    assert mean("l4_e") == pytest.approx(l4["e_rel_dist"])
    assert mean("l4_f") == pytest.approx(l4["f_rel_size"])
    assert mean("l5_AR") == pytest.approx(l5["delta_AR"]) and mean("l5_Lopti") == pytest.approx(
        l5["delta_Lopti"])
    assert mean("l1_rho") == pytest.approx(ms.l1_evidence(data).numbers["rho_mean"])
    sv = ms.seed_values(data)
    assert all(eff[s]["l4_d"] == pytest.approx(sv[s]["norm_bins"][0] / sv[s]["norm_all"])
               for s in eff)


def test_one_seed_is_measured_when_asked_for():
    cfg, task = tiny_config(), DenseKK()
    model = load_model(cfg, task)
    data = ms.measure(model, task, cfg, seeds=(3,), batches=1, progress=False, min_seeds=1)
    assert data["seeds"] == [3] and len(data["batches"]) == 1
    with pytest.raises(ValueError, match="distinct"):
        ms.measure(model, task, cfg, seeds=(3, 3), batches=1, progress=False, min_seeds=1)


def test_the_probes_name_the_warm_start(monkeypatch):
    """The stored probes name the warm start they measured and the machine beside their seeds
    and batches (the measurement itself stubbed: what is named is the point here)."""
    model = tiny_model()
    monkeypatch.setattr(presets, "warm_model", lambda preset, progress=True: "warm")
    monkeypatch.setattr(ms, "load_warm_start", lambda path, device=None: (model, None))
    monkeypatch.setattr(ms, "measure", lambda m, task, cfg, seeds, batches, progress=True: {
        "seeds": list(seeds), "batches": [{"seed": s, "batch": 0} for s in seeds]})
    data = ms.measure_probes("full", progress=False)
    assert data["seeds"] == list(ms.PROBE_SIZES["full"]["seeds"])
    check_named(data, weights_fingerprint(model), machine())
