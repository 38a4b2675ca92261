"""The decisiveness threshold ``tau`` and the rollouts ``K``: calibrated once, where the truth is
known, then fixed.

Source: the decisiveness of :mod:`tailtheory.lopti.decisive.branches` (a question LOPTI, arXiv
2505.12929, leaves open).

``tau`` is in reward units. On ``kk_prose`` (the ``matched`` recipe's task) a synonym or the
order of the people checked is a free choice: the parser reads every form back, and the reward
reads only the final answer. :func:`calibrate` probes such tokens of the recipe's warm start
(roles ``synonym`` and ``order`` with ``p <= 0.5``; :data:`CAL_FREE` of them, drawn from one
GRPO batch) with :data:`CAL_K` rollouts a branch, and takes as ``tau`` the smallest threshold at
which at most :data:`FREE_CALLED_MAX` of them are called decisive (``D >= tau``), rounded up to
two significant digits. ``K`` is then the smallest of :data:`K_CHOICES` at which the standard
error of ``D`` of those free tokens (scaled by ``sqrt(CAL_K / K)``) is at most ``tau / 3`` for
90% of them. (The rule first written bounded it over :data:`CAL_FORK` decision forks of the
batch with ``p <= 0.5`` as well: measured, that needs ``K`` about 250, some 80 CPU minutes per
policy of ``matched``; the forks' ``D`` lies far from ``tau`` where it is large, so the bound is
kept where ``tau`` is set, and the ``K`` the first rule would need is stored beside as
``K_all``.) A
``tau`` set by estimator noise alone would shrink as ``K`` grows until paraphrase counted as
decisive; set on free tokens at a large ``K``, it measures how much a free choice moves the
expected reward of *this* policy (a rare synonym leads it into less familiar text).

The stored calibration (``results/decisive_calibration.json``, made again by ``tailtheory
measure decisive_calibration``) also reports, at ``tau``, the precision and recall of
"decisive" for the decision forks among the probed ``p <= 0.5`` tokens.
:data:`TAU` and :data:`K` below are its outcome, written once; every later measurement uses them.
"""

from __future__ import annotations

import numpy as np
import torch

from tailtheory.core.measurements import measured
from tailtheory.core.provenance import measured_on
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.engine.rollout.engine import RolloutEngine
from tailtheory.engine.threads import model_threads
from tailtheory.engine.trainer import rollout_config, step_problems
from tailtheory.experiments.policies import grpo_config, policies_identity, probed_policy
from tailtheory.lopti.decisive.branches import LEGACY_SAMPLER, branch_values, sampler_config
from tailtheory.lopti.decisive.noise import se_before_after
from tailtheory.lopti.decisive.probe import FREE_ROLES, batch_responses, token_roles
from tailtheory.lopti.onestep import probe_batch

CAL_RECIPE = "matched"
"""The recipe whose warm start calibrates ``tau`` (its task, ``kk_prose``, has free slots)."""

CAL_K = 64
"""Rollouts a branch in the calibration."""

CAL_FREE, CAL_FORK = 200, 100
"""Free-slot and decision-fork tokens (``p <= 0.5``) probed."""

CAL_PROMPTS = 16
"""Prompts of the calibration batch (seed 1, batch 0 of the recipe) whose responses are read."""

P_MAX = 0.5
"""Only tokens with ``p <= 0.5`` calibrate (a token at ``p`` near 1 has ``D`` near 0 whatever
it does)."""

FREE_CALLED_MAX = 0.10
"""At most this share of free tokens may be called decisive at ``tau``."""

K_CHOICES = (16, 32, 64, 128)
"""The ``K`` the calibration chooses from."""

SE_FRACTION = 1 / 3
"""``K``: the standard error of ``D`` at most ``tau / 3`` (for 90% of the calibration tokens)."""

VERSION = 2
"""Version 2 (the rule of 2026-11-29, ``paper_repro.md``): the branches coupled, the free
tokens' standard error reported before and after coupling. Version 1 (``inverse_cdf``, not named
in its config) set the first ``tau`` = 0.081 and ``K`` = 64."""

SAMPLER = "coupled"
"""The branches' pairing of the calibration (:data:`~tailtheory.lopti.decisive.branches.SAMPLERS`)."""

BEFORE = LEGACY_SAMPLER
"""The pairing the free tokens are probed with a second time, on the same tokens and seeds, to
report their standard error before coupling (``se_before_after``)."""

COMMAND = measure_command("decisive_calibration")

TAU = 0.06
"""The threshold, in reward units, as calibrated under version 2 (coupled branches,
``results/decisive_calibration.json``): 10% of the 200 free-slot tokens reach it at K = 64
(version 1, ``inverse_cdf``: 0.081). Fixed; every later measurement uses it."""

K = 64
"""Rollouts a branch, as calibrated: no choice up to 128 brings the free tokens' standard error
to ``TAU / 3`` (0.038 for 90% of them at K = 64 coupled, 0.055 on the same tokens uncoupled; the
bound needs K of about 240), so ``K`` is the calibration's own, and a single token's call is
noisy: the three-way calls and the reporting floor of :mod:`tailtheory.lopti.decisive.noise`
say how noisy."""


def calibration_config() -> dict:
    """What the stored calibration is keyed by: the recipe's policies and the sizes above."""
    return {"version": VERSION, **policies_identity(CAL_RECIPE), "K": CAL_K, "free": CAL_FREE,
            "fork": CAL_FORK, "prompts": CAL_PROMPTS, "p_max": P_MAX,
            "free_called_max": FREE_CALLED_MAX, "k_choices": list(K_CHOICES),
            "se_fraction": SE_FRACTION, **sampler_config(SAMPLER), "before": BEFORE}


def measure_calibration(progress: bool = True) -> dict:
    """Probe the calibration tokens (module docstring), coupled, and the free ones again with
    :data:`BEFORE`; returns every probed token's ``role``,
    ``p``, ``D``, ``D_se``, ``effect``, the threshold and ``K`` they give, and the warm start's
    fingerprint and the machine (:func:`~tailtheory.core.provenance.measured_on`)."""
    model, task = probed_policy("warm", CAL_RECIPE, progress)
    cfg = grpo_config(CAL_RECIPE)
    model = model.float().eval()
    named = measured_on(model)
    with model_threads(model):
        engine = RolloutEngine(model, rollout_config(cfg, task))
        pb = probe_batch(model, task, cfg, engine, torch.Generator().manual_seed(cfg.seed), 0)
        n = CAL_PROMPTS * cfg.group_size
        _, _, pi, responses = batch_responses(pb, n)
        roles = [token_roles(task, r) for r in responses]
        problems = step_problems(0, cfg, task)
        gen = torch.Generator().manual_seed(2024)
        pos = []
        for want, n_max in ((FREE_ROLES, CAL_FREE), (("fork",), CAL_FORK)):
            cand = [(b, t) for b in range(n) for t in range(len(responses[b]))
                    if roles[b][t] in want and float(pi[b, t]) <= P_MAX]
            pick = torch.randperm(len(cand), generator=gen)[:n_max].tolist()
            pos += [cand[k] for k in sorted(pick)]
        rc = rollout_config(cfg, task)
        probs = [problems[b // cfg.group_size] for b in range(n)]
        out = branch_values(model, task, probs, responses, pos, CAL_K, rc.max_new_tokens,
                            rc.temperature, seed=77, progress=progress, sampler=SAMPLER)
        free = [(b, t) for b, t in pos if roles[b][t] in FREE_ROLES]
        old = branch_values(model, task, probs, responses, free, CAL_K, rc.max_new_tokens,
                            rc.temperature, seed=77, progress=progress, sampler=BEFORE)
    keys = ("D", "D_se", "effect", "gap", "gap_se")
    tokens = [{"row": b, "t": t, "role": roles[b][t], "p": float(pi[b, t]),
               **{k: float(out[k][i]) for k in keys}} for i, (b, t) in enumerate(pos)]
    before = [{"row": b, "t": t, "role": roles[b][t], "p": float(pi[b, t]),
               **{k: float(old[k][i]) for k in keys}} for i, (b, t) in enumerate(free)]
    return {"tokens": tokens, "before": before, **choose(tokens),
            "se_before_after": se_before_after(before, tokens), **named}


def choose(tokens: list[dict]) -> dict:
    """``tau``, ``K`` and the agreement at ``tau`` of the calibration ``tokens`` (rule of the
    module docstring): ``{"tau", "K", "se_met", "free_called", "precision", "recall", "n_free",
    "n_fork", "se_q90_free", "se_q90_all", "K_free", "K_all"}``. ``K_free`` and ``K_all`` are the
    ``K`` the bound needs over the free tokens and over all of them (continuous); when no choice
    of :data:`K_CHOICES` meets it, ``K`` is :data:`CAL_K` and ``se_met`` is False."""
    free = np.array([t["D"] for t in tokens if t["role"] in FREE_ROLES])
    if len(free) < 10:
        raise ValueError(f"{len(free)} free-slot tokens: too few to calibrate on")
    m = int(np.floor(FREE_CALLED_MAX * len(free)))          # at most m may reach tau
    ranked = np.sort(free)[::-1]
    tau = _round_up(float(np.nextafter(ranked[m], np.inf)), 2)
    se_free = float(np.quantile([t["D_se"] for t in tokens if t["role"] in FREE_ROLES], 0.9))
    se_all = float(np.quantile([t["D_se"] for t in tokens], 0.9))
    bound = SE_FRACTION * tau
    K = next((k for k in K_CHOICES if se_free * np.sqrt(CAL_K / k) <= bound), None)
    met = K is not None
    K = K if met else CAL_K              # none affordable: the calibration's own K, flagged
    called = np.array([t["D"] >= tau for t in tokens])
    fork = np.array([t["role"] == "fork" for t in tokens])
    return {"tau": tau, "K": int(K), "free_called": float(np.mean(free >= tau)),
            "precision": float((called & fork).sum() / max(called.sum(), 1)),
            "recall": float((called & fork).sum() / max(fork.sum(), 1)),
            "n_free": int(len(free)), "n_fork": int(fork.sum()), "se_q90_free": se_free,
            "se_q90_all": se_all, "K_all": float(CAL_K * (se_all / bound) ** 2),
            "se_met": met, "K_free": float(CAL_K * (se_free / bound) ** 2)}


def _round_up(x: float, digits: int) -> float:
    """``x`` rounded up to ``digits`` significant digits."""
    if x <= 0:
        return float(np.nextafter(0.0, 1.0)) if x == 0 else x
    e = int(np.floor(np.log10(x))) - digits + 1
    return float(np.ceil(x / 10.0**e) * 10.0**e)


def calibration(profile: str = "quick") -> dict:
    """The stored calibration (``quick``) or a new one, stored (``thorough``)."""
    return measured("decisive_calibration", calibration_config(),
                    lambda: measure_calibration(True), profile, COMMAND)


MEASURE = register_measure(Measure(
    "decisive_calibration", "the decisiveness threshold tau and rollouts K, calibrated on "
    "kk_prose's free slots of the matched recipe's warm start",
    f"not recorded; {CAL_K} rollouts a branch for each of {CAL_FREE + CAL_FORK} tokens",
    calibration_config, lambda: calibration("thorough")))
