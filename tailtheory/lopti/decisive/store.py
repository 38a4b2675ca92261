"""The stored decisiveness of each recipe's two policies: what its low-probability tokens do.

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1(a) and (d), each bin split by
:mod:`tailtheory.lopti.decisive.branches` at the calibrated ``tau`` and ``K``
(:mod:`tailtheory.lopti.decisive.calibration`).

Per recipe (:data:`RECIPES`) and policy (its warm start and GRPO half-way,
:mod:`tailtheory.experiments.policies`): :data:`SEEDS` x one GRPO batch, the responses of its
first :data:`PROMPTS` prompts probed
(:func:`~tailtheory.lopti.decisive.probe.measure_decisiveness`),
stored in
``results/decisive_<recipe>.json``; ``quick`` reads it, ``thorough`` measures again
(``tailtheory measure decisive_<recipe>``).
:func:`decisive_share` is the quantity the ledger and the regime table quote: the weighted share
of the lowest bin's tokens that are decisive, with the shares that help and hurt and the
format-breaking share counted apart.

Claims: L1-L6 (the decisive share printed beside each recipe's verdict,
``tailtheory.lopti.claims``).
"""

from __future__ import annotations

from tailtheory.core.measurements import measured
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.policies import (POLICIES, grpo_config, policies_identity,
                                              policy_measured_on, probed_policy)
from tailtheory.lopti.decisive import calibration as cal
from tailtheory.lopti.decisive.branches import LEGACY_SAMPLER, sampler_config
from tailtheory.lopti.decisive.probe import OTHERS, measure_decisiveness
from tailtheory.lopti.decisive.report import bin_summary

RECIPES = ("learn", "matched", "decide")
"""The recipes whose policies are probed."""

SEEDS = (1, 2)
"""GRPO batches probed per policy: step 0 of these seeds."""

PROMPTS = 4
"""Prompts of each batch whose responses are probed (8 responses each): every lowest-bin token
of them, about 290 on ``matched``, plus :data:`~tailtheory.lopti.decisive.probe.OTHERS`."""

VERSION = 1

SAMPLER = LEGACY_SAMPLER
"""The branches' pairing of the stored measurements (version 1: ``inverse_cdf``, not named in
their config). The re-measurement under the rule of 2026-11-29 (``paper_repro.md``) sets it to
``coupled`` with version 2; its config then names it and the version-1 stores are stale."""

COMMAND = measure_command("decisive_{recipe}")
"""With the recipe's name put in, measures again and stores ``results/decisive_<recipe>.json``."""


def _check(recipe: str) -> str:
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; valid: {', '.join(RECIPES)}")
    return recipe


def decisive_config(recipe: str) -> dict:
    """What ``results/decisive_<recipe>.json`` is keyed by."""
    return {"version": VERSION, **policies_identity(_check(recipe)), "tau": cal.TAU,
            "K": cal.K,
            "seeds": list(SEEDS), "prompts": PROMPTS, "others": OTHERS,
            "policies": list(POLICIES), **sampler_config(SAMPLER)}


def measure_recipe(recipe: str, progress: bool = True) -> dict:
    """Policy -> :func:`~tailtheory.lopti.decisive.probe.measure_decisiveness` of ``recipe``, with
    the model it names and the machine
    (:func:`~tailtheory.experiments.policies.policy_measured_on`)."""
    cfg = grpo_config(_check(recipe))
    out = {}
    for policy in POLICIES:
        model, task = probed_policy(policy, recipe, progress)
        named = policy_measured_on(policy, model, recipe)
        out[policy] = {**measure_decisiveness(model, task, cfg, SEEDS, 1, cal.K, OTHERS,
                                              PROMPTS, cal.TAU, progress, sampler=SAMPLER),
                          **named}
    return out


def decisive_data(profile: str, recipe: str) -> dict:
    """The stored measurement of ``recipe`` (``quick``) or a new one, stored (``thorough``)."""
    return measured(f"decisive_{_check(recipe)}", decisive_config(recipe),
                    lambda: measure_recipe(recipe), profile, COMMAND.format(recipe=recipe))


def decisive_share(data: dict) -> dict:
    """Per policy of a stored measurement: the lowest bin's ``token_frac``, ``decisive_share``,
    ``helps``, ``hurts`` (shares of its decisive tokens) and ``format_breaking``."""
    out = {}
    for policy, d in data.items():
        low = bin_summary(d, cal.TAU).iloc[0]
        out[policy] = {k: float(low[k]) for k in ("token_frac", "decisive_share", "helps",
                                                   "hurts", "format_breaking")}
    return out


MEASURES = {recipe: register_measure(Measure(
    f"decisive_{recipe}", f"which lowest-bin tokens decide the answer (L1-L6's decisive share) "
    f"on the {recipe} recipe's warm start and half-way policy",
    f"not recorded; K = {cal.K} rollouts a branch for every lowest-bin token of {PROMPTS} "
    f"prompts' responses (about 290 on matched), {len(SEEDS)} batches a policy",
    lambda r=recipe: decisive_config(r), lambda r=recipe: decisive_data("thorough", r)))
    for recipe in RECIPES}
