"""The check behind every stored measurement's provenance test, and which test checks each.

A row that a registered measurement (:func:`tailtheory.experiments.measures.measures`) makes today
names the model it measured and the machine it ran on, as ``tailtheory measure list`` reads them
(:func:`~tailtheory.experiments.measures.models`, :func:`~tailtheory.experiments.measures.machines`):
:func:`check_named` asserts it of one entry. :data:`NAMED_BY` maps each measurement to the test
that shows it of the function that makes it (a monkeypatched measurement or a tiny model: seconds
at most); :data:`UNNAMED` lists the measurements no such test covers, each with the reason.
``tests/experiments/test_measures.py`` walks the registry, so a new measurement in neither fails.
"""

from __future__ import annotations

from tailtheory.core.models import tiny_lm
from tailtheory.experiments import policies
from tailtheory.experiments.measures import machines, models

LADDER = "tests/ladder"
LOPTI = "tests/lopti"

NAMED_BY: dict[str, str] = {
    "ladder": f"{LADDER}/test_build.py::test_a_built_rung_names_its_two_models_and_machines",
    "ladder_models": f"{LADDER}/test_build.py::test_a_built_rung_names_its_two_models_and_machines",
    "ladder_effects": f"{LADDER}/test_effects.py::"
                      "test_effects_are_stored_per_seed_and_never_measured_twice",
    "ladder_probes": f"{LADDER}/test_probes.py::test_probe_rows_name_the_model_and_the_machine",
    "v8_models": f"{LADDER}/test_probes.py::test_v8_rows_name_the_corpus_lm_and_the_machine",
    "precision_ladder": f"{LADDER}/test_mismatch.py::test_precision_rows_name_the_warm_start",
    "batch_shape_ladder": f"{LADDER}/test_mismatch.py::test_rungs_are_stored_one_by_one",
    "v7_64": f"{LADDER}/test_mismatch.py::test_v7_rows_name_the_model_and_the_machine",
    "v7_units": f"{LADDER}/test_mismatch.py::test_v7_rows_name_the_model_and_the_machine",
    "dose_ladder_calibration": f"{LADDER}/test_dose.py::test_calibration_rows_name_the_warm_start",
    "lopti_probes": f"{LOPTI}/test_measurement.py::test_the_probes_name_the_warm_start",
    **{f"lopti_probes_{r}": f"{LOPTI}/test_learn_probes.py::test_each_policy_names_its_start"
       for r in ("learn", "matched", "decide")},
    **{f"decisive_{r}": f"{LOPTI}/decisive/test_store.py::test_each_policy_names_its_start"
       for r in ("learn", "matched", "decide")},
    "decisive_frontier": f"{LOPTI}/decisive/test_frontier.py::"
                         "test_each_design_names_its_warm_start",
    "moved_matched": f"{LOPTI}/test_moved.py::"
                     "test_scores_on_the_quick_warm_start_name_it_and_join_only_the_stores_batch",
    "decide_design_gate": f"{LOPTI}/decisive/test_gate.py::"
                          "test_each_policy_of_a_design_names_its_start",
    "decisive_calibration": f"{LOPTI}/decisive/test_calibration.py::"
                            "test_the_calibration_names_the_warm_start",
    "m7_corpus_lm": "tests/mismatch/test_claims.py::test_m7_stores_name_their_models",
    "m7_matched": "tests/mismatch/test_claims.py::test_m7_stores_name_their_models",
    "v2_corpus_lm": "tests/tim/test_claims.py::test_v2_store_names_the_corpus_lm",
    "p4_trained": "tests/pruning/test_trained_tails.py::test_each_setting_names_its_model",
    "p4_matched": "tests/pruning/test_matched_tails.py::test_each_policy_names_its_start",
    **{f"regime_{r}": "tests/regime/test_measure.py::test_rows_carry_the_warm_starts_provenance"
       for r in ("learn", "matched")},
}
"""Measurement -> ``path::test`` showing that the rows its function makes today name their model
and machine."""

UNNAMED: dict[str, str] = {
    "decisive_designs": "a record: GRPO runs made once while choosing the decide recipe, each "
                        "row with the command that ran it; never made again",
    "dvp_training": "superseded by study dvp_learn; never made again",
    "lopti_training": "superseded by study lopti_learn; never made again",
    "mismatch_training": "superseded by studies mismatch_learn and mismatch_dose; never made "
                         "again",
    "otb_training": "superseded by study otb_learn; never made again",
    "verdicts": "superseded by today's verdicts (tailtheory verify), which it is printed "
                "beside; never made again",
}
"""Measurement -> why no test shows its rows naming their model: only stores that are never made
again (a record, a superseded store) may stand here."""


def check_named(entry, weights, machine: str) -> None:
    """``entry`` (a row, or the entry one model's measurement fills) names exactly the models
    ``weights`` (a fingerprint or several) and the one machine ``machine``."""
    want = sorted({weights} if isinstance(weights, str) else set(weights))
    assert models(entry) == want, f"models named: {models(entry)}, want {want}"
    assert machines(entry) == [machine], f"machines named: {machines(entry)}, want {machine}"


def tiny_model(seed: int = 0):
    """A tiny LM (vocabulary 64, one layer): a model to fingerprint in a second."""
    return tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1, seed=seed)


def two_policies(monkeypatch, where, task=None) -> tuple:
    """``(warm, mid)``: two tiny models that ``where.probed_policy`` hands out with ``task`` as a
    recipe's warm start and half-way policy, the warm one also being the start that
    :func:`~tailtheory.experiments.policies.policy_measured_on` loads for the half-way policy."""
    warm, mid = tiny_model(0), tiny_model(1)
    monkeypatch.setattr(where, "probed_policy", lambda policy, recipe="learn", progress=True:
                        ((warm if policy == "warm" else mid), task))
    monkeypatch.setattr(policies, "load_start", lambda cfg: (warm, None))
    return warm, mid
