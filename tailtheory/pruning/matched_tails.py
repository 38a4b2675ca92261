"""DVP's pruning trade (P4) on the papers' regime: the ``matched`` recipe's policies.

Source: DVP, Li et al., arXiv 2512.23087 (P4). The measurement of
:mod:`tailtheory.pruning.trained_tails` (``rollout_setting``: the bf16 sampler against the
float32 trainer, the min-p sweep, the sampled tokens' mismatch, the mass shares) on the
``matched`` recipe's warm start and its GRPO policy half-way, each on its own sampled responses
to held-out ``kk_prose`` prompts. P4's verdict is read here (``tailtheory.pruning.claims._p4``),
today's trained models beside it. Stored in ``results/p4_matched.json`` (``tailtheory measure
p4_matched``).
"""

from __future__ import annotations

import time

from tailtheory.core.measurements import measured
from tailtheory.engine.threads import torch_threads
from tailtheory.experiments import policies as lp
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.policies import policy_measured_on, probed_policy
from tailtheory.pruning.trained_tails import (P4_TRAINED_VERSION, P_BIN_EDGES, SEQ_QUANTILES,
                                              TrainedP4Config, rollout_setting)

MATCHED_SETTINGS = ("matched_warm", "matched_mid")
"""P4 on the papers' regime: the ``matched`` recipe's warm start and its GRPO policy half-way
(``tailtheory.experiments.policies.probed_policy``), each on its own sampled responses to held-out
``kk_prose`` prompts (a byte-level BPE of 4,096 ids whose tail is words the model has read)."""


def measure_matched(cfg: TrainedP4Config = TrainedP4Config(), progress: bool = False) -> dict:
    """:func:`rollout_setting` of each policy of :data:`MATCHED_SETTINGS` (JSON-ready), with the
    model it names and the machine (:func:`~tailtheory.experiments.policies.policy_measured_on`),
    on one CPU thread; the half-way policy is trained first if the run cache lacks it."""

    settings, seconds = {}, {}
    with torch_threads(1):
        for name in MATCHED_SETTINGS:
            t0 = time.perf_counter()
            policy = name.removeprefix("matched_")
            model, task = probed_policy(policy, "matched", progress)
            prompts = [p.prompt_ids for p in task.problems(cfg.policy_prompts,
                                                            seed=cfg.prompt_seed)]
            settings[name] = rollout_setting(model, prompts, task.stop_ids, task.pad_id,
                                             task.max_response_len, cfg)
            seconds[name] = round(time.perf_counter() - t0, 1)
            settings[name].update(policy_measured_on(policy, model, "matched"))
    return {"settings": settings, "seconds": seconds}


def p4_matched_identity(cfg: TrainedP4Config = TrainedP4Config()) -> dict:
    """What ``results/p4_matched.json`` is keyed by: the sampler, the sweep and the prompts of
    ``cfg``, this module's constants and the probed policies (the warm start's hash, the GRPO
    run and step of the half-way policy)."""
    return {"version": P4_TRAINED_VERSION, "path": cfg.path, "rule": cfg.rule,
            "rhos": list(cfg.rhos), "taus": list(cfg.taus), "policy_prompts": cfg.policy_prompts,
            "prompt_seed": cfg.prompt_seed, "sample_seed": cfg.sample_seed,
            "edges": list(P_BIN_EDGES), "quantiles": list(SEQ_QUANTILES),
            **lp.policies_identity("matched")}


P4_MATCHED_COMMAND = measure_command("p4_matched")
"""Regenerates ``results/p4_matched.json``."""


def p4_matched_data(profile: str, cfg: TrainedP4Config = TrainedP4Config()) -> dict:
    """The stored measurement on the ``matched`` recipe (``quick``) or a new one (``thorough``)."""
    return measured("p4_matched", p4_matched_identity(cfg), lambda: measure_matched(cfg),
                    profile, P4_MATCHED_COMMAND)


MEASURE = register_measure(Measure(
    "p4_matched", "DVP's pruning trade (P4) on the matched recipe's warm start and half-way "
    "policy, each on its own sampled responses", "about 6 CPU minutes on one thread (232 s and "
    "135 s recorded; the half-way policy is trained first when not cached)",
    p4_matched_identity, lambda: p4_matched_data("thorough")))
