"""The recipes' shared policies (``tailtheory/experiments/policies.py``)."""

import pytest

from provenance_check import tiny_model
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.experiments import policies as lp
from tailtheory.experiments.runs import run_key


def test_probed_policy_names_its_policies_and_recipes():
    """An unknown policy or recipe is one clear error, before any model loads."""
    with pytest.raises(ValueError, match="unknown policy 'late'; valid: warm, mid"):
        lp.probed_policy("late", "matched")
    with pytest.raises(ValueError, match="unknown recipe"):
        lp.probed_policy("warm", "tiny")
    assert lp.grpo_config("matched").method == "grpo" and lp.grpo_config("matched").seed == 1


def test_policies_identity_names_the_warm_start_and_the_half_way_run():
    """The identity of a measurement on a recipe's policies: its task, its warm start's hash,
    and the run key and step of the half-way policy (the run :func:`grpo_config` names)."""
    ident = lp.policies_identity("matched")
    assert ident["task"] == "kk_prose" and ident["mid_step"] == lp.MID_STEP
    assert ident["mid_run"] == run_key(lp.grpo_config("matched"))
    assert ident["warm_start"] != lp.policies_identity("learn")["warm_start"]


@pytest.mark.parametrize("recipe", ["learn", "matched"])
def test_policies_identity_reads_the_same_on_a_machine_with_a_gpu(monkeypatch, recipe):
    """The stored measurements keyed by the probed policies were made on the CPU: a machine where
    ``auto`` resolves to ``cuda`` must compute the same identity, not call them stale."""
    import torch

    here = lp.policies_identity(recipe)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert lp.grpo_config(recipe).device == "cpu"
    assert lp.policies_identity(recipe) == here


def test_both_policies_are_named_by_the_warm_start_and_the_machine(monkeypatch):
    """A row measured on the half-way policy names the model its run started from (the
    recipe's warm start), not the trained weights at hand; both name the machine."""
    warm, mid = tiny_model(0), tiny_model(1)
    monkeypatch.setattr(lp, "load_start", lambda cfg: (warm, None))
    for policy, model in (("warm", warm), ("mid", mid)):
        assert lp.policy_measured_on(policy, model, "matched") == {
            "weights": weights_fingerprint(warm), "machine": machine()}
    with pytest.raises(ValueError, match="unknown policy 'late'"):
        lp.policy_measured_on("late", warm)
