"""LOPTI's Figures 1 and 3 (claims L4, L5) on the learning testbed: the one-step probes of
:mod:`tailtheory.lopti.measurement` on GRPO batches of the ``learn`` recipe, from its warm start
*and* from a policy half-way through a GRPO run of it (does the interference appear once the
policy is learning?).

Source: LOPTI (Yang et al., arXiv 2505.12929), Figures 1 and 3.

- ``warm``: the recipe's warm start (``kk_trace`` with two people; held-out accuracy about 0.35).
- ``mid``: GRPO seed :data:`~tailtheory.experiments.policies.MID_SEED` of the recipe half-way
  (:func:`~tailtheory.experiments.policies.mid_step`: step 60 of its 120)
  (held-out accuracy about 0.6): that run is trained again to step 60 in a folder of its own
  (the run cache keeps a run's last checkpoint only), and its metric lines are checked equal to
  the cached run's first 60 (:func:`mid_policy`).

Each policy: the ``learn`` entry of :data:`tailtheory.lopti.measurement.PROBE_SIZES` (3
seeds x 4 batches) of the recipe's size (32 prompts x 8
responses), the batch of seed ``s`` and index ``i`` drawing the problems the trainer draws at
step ``i`` of seed ``s``. The rules are the stored measurement's, unchanged (module docstring of
:mod:`tailtheory.lopti.measurement`: L4 the worst of (d), (e), (f); L5 AR and Lopti against
GRPO on the top-bin rise fraction), applied to each policy; a claim's verdict on the testbed is
the worst of its two policies' (:func:`tailtheory.experiments.comparison.worst`), fixed before the
measurement. Stored in ``results/lopti_probes_learn.json``; ``quick`` reads it, ``thorough``
measures again (about 10 CPU minutes, the mid-run policy included;
``tailtheory measure lopti_probes_learn``).

The ``matched`` recipe (the papers' regime, :data:`RECIPES`) is probed the same way and stored
apart, in ``results/lopti_probes_matched.json`` (``tailtheory measure lopti_probes_matched``: 42
minutes for the warm start's 12 batches and 25 for the half-way policy's on a busy 2-core CPU);
the claims L1, L4 and L5 are judged there, the ``learn`` recipe's verdicts beside.
"""

from __future__ import annotations

from tailtheory.core.measurements import measured
from tailtheory.core.registry import Evidence
from tailtheory.experiments.comparison import worst
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.policies import (MID_SEED, POLICIES, grpo_config, mid_step,
                                              policy_measured_on, probed_policy)
from tailtheory.lopti.measurement import (PROBE_SIZES, l1_evidence, l4_evidence, l5_evidence,
                                          measure, probe_config as base)

COMMAND = measure_command("lopti_probes_{recipe}")
"""With the recipe's name put in, measures again and stores
``results/lopti_probes_<recipe>.json``."""


def _sizes(recipe: str = "learn"):
    return PROBE_SIZES[recipe]["seeds"], PROBE_SIZES[recipe]["batches"]


RECIPES = ("learn", "matched", "decide")
"""The recipes probed: the learning testbed, the papers' histogram and the recipe whose
low-probability tokens decide the answer (each stored apart)."""


def _check(recipe: str) -> str:
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r} for the probes; valid: {', '.join(RECIPES)}")
    return recipe


def probe_config(recipe: str = "learn") -> dict:
    """What the stored measurement is keyed by: the full measurement's keys on the recipe's
    preset, the policies and the half-way step."""
    return {**base(_check(recipe)), "policies": list(POLICIES), "mid_seed": MID_SEED,
            "mid_step": mid_step(_check(recipe))}


def measure_learn_probes(progress: bool = True, recipe: str = "learn") -> dict:
    """Policy -> the one-step measurement of :func:`tailtheory.lopti.measurement.measure`, with
    the model it names and the machine
    (:func:`~tailtheory.experiments.policies.policy_measured_on`)."""
    cfg, (seeds, batches) = grpo_config(recipe), _sizes(recipe)
    out = {}
    for policy in POLICIES:
        model, task = probed_policy(policy, recipe, progress)
        named = policy_measured_on(policy, model, recipe)      # before any probe step
        out[policy] = {**measure(model, task, cfg, seeds, batches, progress=progress), **named}
    return out


def learn_probe_data(profile: str, recipe: str = "learn") -> dict:
    """The stored measurement of ``recipe`` (``quick``; ``results/lopti_probes_<recipe>.json``)
    or a new one, stored (``thorough``)."""
    return measured(f"lopti_probes_{_check(recipe)}", probe_config(recipe),
                    lambda: measure_learn_probes(True, recipe), profile,
                    COMMAND.format(recipe=recipe))


def _both(fn, data: dict, shown: tuple = (), recipe: str = "learn") -> Evidence:
    parts = {p: fn(data[p]) for p in POLICIES}
    nums = {f"{p}:{k}": v for p, ev in parts.items() for k, v in ev.numbers.items()}
    nums.update({f"{p}:verdict": str(ev.verdict) for p, ev in parts.items()})
    note = (f"{recipe} recipe, warm start and GRPO step {mid_step(recipe)}: the worst of the two; "
            + parts["warm"].note)
    key = tuple(f"{p}:verdict" for p in POLICIES) + tuple(f"mid:{k}" for k in shown)
    return Evidence(worst(*(ev.verdict for ev in parts.values())), nums, note, key)


def l1_learn_evidence(data: dict, recipe: str = "learn") -> Evidence:
    """L1 on both policies (rule of :func:`tailtheory.lopti.measurement.l1_evidence`)."""
    return _both(l1_evidence, data, ("rho_mean", "rho_se"), recipe)


def l4_learn_evidence(data: dict, recipe: str = "learn") -> Evidence:
    """L4 on both policies (rule of :func:`tailtheory.lopti.measurement.l4_evidence`)."""
    return _both(l4_evidence, data, ("e_rel_dist", "f_rel_size"), recipe)


def l5_learn_evidence(data: dict, recipe: str = "learn") -> Evidence:
    """L5 on both policies (rule of :func:`tailtheory.lopti.measurement.l5_evidence`)."""
    return _both(l5_evidence, data, ("delta_AR", "delta_Lopti"), recipe)


COSTS = {"learn": "about 10 CPU minutes (the half-way policy included)",
         "matched": "about 67 minutes (42 for the warm start's 12 batches, 25 for the "
                    "half-way policy's, on a busy 2-core CPU)",
         "decide": "not recorded (as many batches as matched's, of another task)"}
"""What measuring each recipe's probes again costs (module docstring)."""

MEASURES = {recipe: register_measure(Measure(
    f"lopti_probes_{recipe}", f"LOPTI's one-step probes (L1, L4, L5) on the {recipe} recipe's "
    f"warm start and half-way policy, 3 seeds x 4 batches each", COSTS[recipe],
    lambda r=recipe: probe_config(r), lambda r=recipe: learn_probe_data("thorough", r)))
    for recipe in RECIPES}
