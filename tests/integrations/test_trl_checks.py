"""The TRL settings ``TailGRPOTrainer`` cannot run with (``tailtheory.integrations.trl_checks``),
checked on plain namespaces: no TRL needed."""

from types import SimpleNamespace

import pytest

from tailtheory.engine.registry import parse_methods
from tailtheory.integrations.trl_checks import LOSS_AGG_OF, check_trl_settings

TRL_DEFAULTS = dict(loss_type="dapo", beta=0.0, delta=None, importance_sampling_level="token",
                    top_entropy_quantile=1.0, off_policy_mask_threshold=None, entropy_coef=0.0,
                    use_adaptive_entropy=False, scale_rewards="group", num_iterations=1,
                    use_vllm=False, vllm_importance_sampling_correction=True,
                    trm_estimator="exact", dvp_rule="min_p", dvp_rho=1e-6, min_p=None)
"""The fields the checks read, at TRL 1.16's defaults and the engine's."""


def _args(**kw) -> SimpleNamespace:
    return SimpleNamespace(**{**TRL_DEFAULTS, **kw})


@pytest.mark.parametrize("method, kw", [
    ("grpo", {}), ("grpo", {"loss_type": "grpo"}),
    ("dr_grpo", {"loss_type": "dr_grpo", "scale_rewards": "none"}),
    ("ar+lopti", {"num_iterations": 2}),
    ("tis", {"use_vllm": True, "vllm_importance_sampling_correction": False}),
    ("trm", {"use_vllm": True, "vllm_importance_sampling_correction": False,
             "trm_estimator": "k2k3"}),
    ("dvp", {"min_p": 1e-6}),
])
def test_settings_the_engine_can_run(method, kw):
    check_trl_settings(_args(**kw), parse_methods(method))


@pytest.mark.parametrize("method, kw, match", [
    ("grpo", {"loss_type": "cispo"}, "loss_type 'cispo'"),
    ("grpo", {"beta": 0.04}, "beta=0.04"),
    ("grpo", {"delta": 2.0}, "delta=2.0"),
    ("grpo", {"importance_sampling_level": "sequence"}, "importance_sampling_level"),
    ("grpo", {"use_adaptive_entropy": True}, "entropy_coef"),
    ("dr_grpo", {}, "scale_rewards='none'"),
    ("ar+lopti", {}, "num_iterations=2"),
    ("tis", {"use_vllm": True}, "correct the mismatch twice"),
    ("trm", {"use_vllm": True, "vllm_importance_sampling_correction": False}, "k2k3"),
    ("dvp", {}, "min_p"),
    ("dvp", {"use_vllm": True, "vllm_importance_sampling_correction": False}, "vLLM"),
])
def test_settings_the_engine_cannot_run_name_the_knob(method, kw, match):
    with pytest.raises(ValueError, match=match):
        check_trl_settings(_args(**kw), parse_methods(method))


def test_every_supported_loss_type_maps_to_an_engine_aggregation():
    from tailtheory.engine.methods import LOSS_AGGS

    assert set(LOSS_AGG_OF.values()) <= set(LOSS_AGGS)
