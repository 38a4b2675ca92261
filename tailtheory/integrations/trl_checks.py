"""The TRL 1.16 settings ``TailGRPOTrainer`` cannot express, checked once by ``TailGRPOConfig``.

Each is a ``ValueError`` naming the knob; why each is unsupported is in the module docstring of
:mod:`tailtheory.integrations.trl`. The engine's loss is the clipped surrogate aggregated by
``loss_agg`` (``tailtheory.engine.methods``), so TRL terms outside it (reference KL, entropy
bonus, two-sided ``delta`` clip, sequence-level ratios, soft gates) have no counterpart.
"""

from __future__ import annotations

from tailtheory.engine.registry import MethodSpec

LOSS_AGG_OF = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
               "dr_grpo": "seq-mean-token-sum-norm"}
"""TRL ``loss_type`` -> the engine's ``loss_agg`` it equals (per micro-batch; see the module)."""


def check_trl_settings(a, spec: MethodSpec) -> None:
    """Raise for the settings of ``a`` (a ``TailGRPOConfig``) that ``spec`` cannot run with."""
    if a.loss_type not in LOSS_AGG_OF:
        raise ValueError(f"loss_type {a.loss_type!r} is not supported by TailGRPOTrainer; valid: "
                         f"{', '.join(LOSS_AGG_OF)} (the engine's loss is the clipped surrogate)")
    unsupported = {"beta": a.beta != 0.0, "delta": a.delta is not None,
                   "importance_sampling_level": a.importance_sampling_level != "token",
                   "top_entropy_quantile": a.top_entropy_quantile < 1.0,
                   "off_policy_mask_threshold": a.off_policy_mask_threshold is not None,
                   "entropy_coef": a.entropy_coef != 0.0 or a.use_adaptive_entropy}
    for knob, bad in unsupported.items():
        if bad:
            raise ValueError(f"{knob}={getattr(a, knob)!r} is not supported by TailGRPOTrainer: "
                             f"the engine's loss has no such term (leave it at TRL's default)")
    names = {m.name for m in spec.methods}
    if spec.loss.name == "dr_grpo" and (a.loss_type != "dr_grpo" or a.scale_rewards != "none"):
        raise ValueError("tail_method dr_grpo is TRL's loss_type='dr_grpo' with "
                         f"scale_rewards='none'; got {a.loss_type!r}, {a.scale_rewards!r}")
    n_pass = 2 if spec.schedule else None
    if n_pass and a.num_iterations != n_pass:
        raise ValueError(f"{spec.schedule.name} makes two update passes, run as TRL's "
                         f"num_iterations=2; got num_iterations={a.num_iterations}")
    if a.use_vllm and a.vllm_importance_sampling_correction and spec.corrections:
        raise ValueError("vllm_importance_sampling_correction=True and tail corrections "
                         f"{[m.name for m in spec.corrections]} would correct the mismatch twice; "
                         "set vllm_importance_sampling_correction=False")
    if "trm" in names and a.trm_estimator == "exact" and a.use_vllm:
        raise ValueError("trm_estimator='exact' needs the rollout's full logits, which vLLM does "
                         "not return to TRL; use trm_estimator='k2k3'")
    if "dvp" in names:
        if a.use_vllm:
            raise ValueError("dvp with use_vllm: the adapter cannot check vLLM's kept vocabulary")
        if a.dvp_rule != "min_p" or a.min_p != a.dvp_rho:
            raise ValueError(f"dvp needs the sampler to prune with the same rule: dvp_rule='min_p' "
                             f"and TRL's min_p equal to dvp_rho ({a.dvp_rho}); got dvp_rule="
                             f"{a.dvp_rule!r}, min_p={a.min_p!r}")


__all__ = ["LOSS_AGG_OF", "check_trl_settings"]
