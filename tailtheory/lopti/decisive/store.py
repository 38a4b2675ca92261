"""The stored decisiveness of each recipe's two policies: what its low-probability tokens do.

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1(a) and (d), each bin split by
:mod:`tailtheory.lopti.decisive.branches` at the calibrated ``tau`` and ``K``
(:mod:`tailtheory.lopti.decisive.calibration`).

Per recipe (:data:`RECIPES`) and policy (its warm start and GRPO half-way,
:mod:`tailtheory.experiments.policies`): :data:`SEEDS` x one GRPO batch, the responses of its
:data:`PROMPTS` prompts, up to :data:`LOW_MAX` lowest-bin tokens of each batch and
:data:`STORE_OTHERS` others probed with coupled branches
(:func:`~tailtheory.lopti.decisive.probe.measure_decisiveness`), stored in
``results/decisive_<recipe>.json``; ``quick`` reads it, ``thorough`` measures again
(``tailtheory measure decisive_<recipe>``). :func:`decisive_share` is what the ledger and the
regime table quote: the lowest bin's excess mean ``D`` with its interval and the share of its
tokens called decisive (three-way, ``D - 2 se >= tau``), reported only above the floor of
:mod:`tailtheory.lopti.decisive.noise`; the shares that help and hurt and the format-breaking
share beside.

Claims: L1-L6 (the decisive share printed beside each recipe's verdict,
``tailtheory.lopti.claims``).
"""

from __future__ import annotations

from tailtheory.core.measurements import measured
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.policies import (POLICIES, grpo_config, policies_identity,
                                              policy_measured_on, probed_policy)
from tailtheory.lopti.decisive import calibration as cal
from tailtheory.lopti.decisive.branches import sampler_config
from tailtheory.lopti.decisive.noise import noise_summary
from tailtheory.lopti.decisive.probe import measure_decisiveness
from tailtheory.lopti.decisive.report import bin_summary

RECIPES = ("learn", "matched", "decide")
"""The recipes whose policies are probed."""

SEEDS = (1, 2, 3)
"""GRPO batches probed per policy: step 0 of these seeds."""

PROMPTS = 32
"""Prompts of each batch whose responses are probed (8 responses each): the whole batch, so a
policy's tokens come from ``3 x 32 = 96`` prompts."""

LOW_MAX = 100
"""Lowest-bin tokens probed a batch at most, drawn uniformly when the batch has more
(:func:`~tailtheory.lopti.decisive.probe.probe_positions`): up to 300 a policy, above the
reporting floor of 200 tokens of 40 prompts (:mod:`tailtheory.lopti.decisive.noise`)."""

STORE_OTHERS = 32
"""Tokens above the lowest bin probed a batch (drawn uniformly, weighted back)."""

VERSION = 2

SAMPLER = "coupled"
"""The branches' pairing (version 2, the rule of 2026-11-29 in ``paper_repro.md``; version 1,
``inverse_cdf`` on the first 4 prompts of 2 batches, is superseded)."""

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
            "seeds": list(SEEDS), "prompts": PROMPTS, "others": STORE_OTHERS,
            "low_max": LOW_MAX, "policies": list(POLICIES), **sampler_config(SAMPLER)}


def measure_recipe(recipe: str, progress: bool = True) -> dict:
    """Policy -> :func:`~tailtheory.lopti.decisive.probe.measure_decisiveness` of ``recipe``, with
    the model it names and the machine
    (:func:`~tailtheory.experiments.policies.policy_measured_on`)."""
    cfg = grpo_config(_check(recipe))
    out = {}
    for policy in POLICIES:
        model, task = probed_policy(policy, recipe, progress)
        named = policy_measured_on(policy, model, recipe)
        out[policy] = {**measure_decisiveness(model, task, cfg, SEEDS, 1, cal.K, STORE_OTHERS,
                                              PROMPTS, cal.TAU, progress, sampler=SAMPLER,
                                              low_max=LOW_MAX),
                          **named}
    return out


def decisive_data(profile: str, recipe: str) -> dict:
    """The stored measurement of ``recipe`` (``quick``) or a new one, stored (``thorough``)."""
    return measured(f"decisive_{_check(recipe)}", decisive_config(recipe),
                    lambda: measure_recipe(recipe), profile, COMMAND.format(recipe=recipe))


def decisive_share(data: dict, group_size: int) -> dict:
    """Per policy of a stored measurement, its lowest bin under the rule of
    :mod:`tailtheory.lopti.decisive.noise`: ``token_frac`` (the bin's share of response tokens),
    ``tokens`` and ``prompts`` probed, ``decisive_share`` (the share called decisive,
    ``D - 2 se >= tau``; NaN below the reporting floor), ``share_note`` (the share with its
    prompt-clustered interval and counts, or "not reportable" with the counts), ``excess_D``
    with ``excess_D_low`` / ``excess_D_high``, and from the point split ``D >= tau``
    (:func:`~tailtheory.lopti.decisive.report.bin_summary`) ``helps``, ``hurts`` and
    ``format_breaking``. ``group_size``: responses a prompt (the prompt of a token stored
    without one is its row // ``group_size``)."""
    out = {}
    for policy, d in data.items():
        low = bin_summary(d, cal.TAU).iloc[0]
        noise = noise_summary(d, cal.TAU, group_size)
        share = noise["share"]
        out[policy] = {"token_frac": float(low["token_frac"]), "tokens": noise["tokens"],
                       "prompts": noise["prompts"],
                       "decisive_share": share["share"] if share["reportable"] else float("nan"),
                       "share_note": share["note"],
                       **{k: noise[k] for k in ("excess_D", "excess_D_low", "excess_D_high")},
                       **{k: float(low[k]) for k in ("helps", "hurts", "format_breaking")}}
    return out


def share_text(recipe: str, data: dict, policy: str = "warm") -> str:
    """``policy``'s decisive share of ``recipe``'s stored ``data`` in a phrase: the share with
    its interval and counts (or "not reportable" with the counts) and the excess mean ``D``."""
    v = decisive_share(data, grpo_config(_check(recipe)).group_size)[policy]
    return (f"{v['share_note']}; excess mean D {v['excess_D']:.3f} "
            f"[{v['excess_D_low']:.3f}, {v['excess_D_high']:.3f}]")


MEASURES = {recipe: register_measure(Measure(
    f"decisive_{recipe}", f"which lowest-bin tokens decide the answer (L1-L6's decisive share) "
    f"on the {recipe} recipe's warm start and half-way policy",
    f"not recorded; K = {cal.K} rollouts a branch for up to {LOW_MAX} lowest-bin tokens of "
    f"{PROMPTS} prompts' responses and {STORE_OTHERS} others, {len(SEEDS)} batches a policy",
    lambda r=recipe: decisive_config(r), lambda r=recipe: decisive_data("thorough", r)))
    for recipe in RECIPES}
