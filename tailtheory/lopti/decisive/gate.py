"""The decisiveness gate of the design search: does a design that learns keep low-probability
tokens that decide the answer?

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1(a)'s lowest bin, 19.2% of Qwen2.5-7B's
sampled tokens on K&K; the rule in ``paper_repro.md`` ("the design search"), fixed before any of
its runs.

A design (:mod:`tailtheory.lopti.decisive.designs`) passes when, at its warm start *and*
half-way (GRPO tuning seed :data:`GATE_SEED` after half its steps, retrained to that step by
:func:`~tailtheory.experiments.policies.mid_policy`):

- ``pi_old <= 0.25`` (temperature 1) holds at least :data:`LOW_MIN` of the sampled response
  tokens, and
- the lower 95% bound of the lowest bin's excess mean ``D`` (coupled branches, prompt-clustered
  bootstrap; :func:`~tailtheory.lopti.decisive.store.decisive_share`) is at least
  :data:`FACTOR` times the ``matched`` recipe's warm-start excess mean ``D``
  (``results/decisive_matched.json``).

Each policy is probed as the recipes' stores are (:mod:`tailtheory.lopti.decisive.store`: the
same batches, prompts, tokens and ``K``), stored per design in
``results/decide_design_gate.json`` as it finishes, with the model it measured and the machine.

Claims: L2, L3, L6, L7, L8, L9 (the recipe they are judged on).
"""

from __future__ import annotations

import json
from dataclasses import replace

from tailtheory.core import measurements
from tailtheory.core.measurements import measurement_path, update_measurement
from tailtheory.core.provenance import measured_on, weights_fingerprint
from tailtheory.engine.load import load_start
from tailtheory.experiments.incremental import load_done
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.policies import POLICIES, grpo_config, mid_policy
from tailtheory.lopti.decisive import calibration as cal
from tailtheory.lopti.decisive import store
from tailtheory.lopti.decisive.designs import (STUDY, TUNING_SEEDS, chosen, design,
                                               design_config, design_table)
from tailtheory.lopti.decisive.probe import measure_decisiveness

STORE = "decide_design_gate"
"""The stored gate measurements, design -> policy -> probe (``results/decide_design_gate.json``)."""

GATE_SEED = TUNING_SEEDS[0]
"""The tuning run whose half-way policy is probed."""

LOW_MIN = 0.096
"""The least share of sampled response tokens in the lowest bin (half of LOPTI's 19.2%)."""

FACTOR = 3.0
"""The design's excess mean ``D`` (lower 95% bound) over ``matched``'s, at least."""


def stored_data(name: str = STORE) -> dict:
    """The stored gate, design -> policy -> probe (``{}`` when the file does not exist; a file
    that does not parse is an error, never read as empty and written over:
    :func:`tailtheory.core.measurements.stored_data`)."""
    return measurements.stored_data(name)


def gate_config() -> dict:
    """What the stored gate is keyed by: the probe's sizes, ``tau``, ``K``, the sampler, the seed."""
    return {"version": 1, "tau": cal.TAU, "K": cal.K, "seeds": list(store.SEEDS),
            "prompts": store.PROMPTS, "others": store.STORE_OTHERS, "low_max": store.LOW_MAX,
            "sampler": store.SAMPLER, "gate_seed": GATE_SEED, "policies": list(POLICIES)}


def design_policy(name: str, policy: str, progress: bool = True) -> tuple:
    """``(model, task)``: design ``name``'s warm start or its GRPO seed :data:`GATE_SEED` after
    half its steps, on the CPU."""
    cfg = replace(design_config(design(name).name, GATE_SEED), device="cpu")
    if policy == "warm":
        return load_start(cfg)
    if policy == "mid":
        return mid_policy(progress, cfg, cfg.steps // 2)
    raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")


def measure_gate(name: str, progress: bool = True) -> dict:
    """Probe design ``name``'s two policies (module docstring), each stored as it finishes and
    skipped when stored; returns the design's stored entry."""
    cfg = replace(design_config(design(name).name, GATE_SEED), device="cpu")
    start = weights_fingerprint(load_start(cfg)[0])
    for policy in POLICIES:
        if policy in stored_data(STORE).get(name, {}):
            continue
        model, task = design_policy(name, policy, progress)
        row = {**measure_decisiveness(model, task, cfg, store.SEEDS, 1, cal.K,
                                      store.STORE_OTHERS, store.PROMPTS, cal.TAU, progress,
                                      sampler=store.SAMPLER, low_max=store.LOW_MAX),
               **measured_on(model, None if policy == "warm" else start)}

        def merged(policy=policy, row=row):
            data = dict(stored_data(STORE))
            data[name] = {**data.get(name, {}), policy: row}
            return gate_config(), data

        update_measurement(STORE, merged, measure_command(STORE))
    return stored_data(STORE)[name]


def gate_verdict(entry: dict, matched_excess: float, group_size: int) -> dict:
    """The gate on one design's stored ``entry`` (policy -> probe): per policy its lowest-bin
    token share, excess mean ``D`` with its interval and counts; ``passes`` when both policies
    meet both numbers (module docstring) against ``matched_excess``."""
    missing = [p for p in POLICIES if p not in entry]
    if missing:
        raise ValueError(f"the gate needs both policies; missing {missing}")
    shares = store.decisive_share({p: entry[p] for p in POLICIES}, group_size)
    need = FACTOR * matched_excess
    out = {"need_excess_D_low": need, "policies": shares}
    out["passes"] = all(v["token_frac"] >= LOW_MIN and v["excess_D_low"] >= need
                        for v in shares.values())
    return out


def failed_designs(matched_excess: float) -> tuple:
    """The designs whose stored gate (both policies) fails it against ``matched_excess``."""
    return tuple(name for name, entry in stored_data().items()
                 if all(p in entry for p in POLICIES)
                 and not gate_verdict(entry, matched_excess, design_config(name, GATE_SEED)
                                      .group_size)["passes"])


def matched_excess() -> float:
    """The ``matched`` recipe's warm-start excess mean ``D`` (``results/decisive_matched.json``)."""
    data = store.decisive_data("quick", "matched")
    return store.decisive_share(data, grpo_config("matched").group_size)["warm"]["excess_D"]


def measure_chosen(progress: bool = True) -> dict:
    """:func:`measure_gate` of the first design that learns and has not failed the gate
    (:func:`~tailtheory.lopti.decisive.designs.chosen`); a ``ValueError`` saying why when there
    is none yet."""
    name, why = chosen(design_table(load_done(STUDY)), failed_designs(matched_excess()))
    if name is None:
        raise ValueError(f"no design to gate: {why} (tailtheory study {STUDY.name})")
    measure_gate(name, progress)
    return stored_data(STORE)


MEASURE = register_measure(Measure(
    STORE, "the decisiveness gate of the design that learns first (lowest-bin share and excess "
    "mean D at its warm start and half-way)",
    "the recipes' probe on two policies, and the half-way policy's GRPO steps",
    gate_config, lambda: measure_chosen(True), resume="yes"))
