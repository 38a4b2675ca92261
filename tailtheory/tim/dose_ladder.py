"""V6 along the model-size ladder: the logit-noise scale that gives a target mismatch on a rung.

The register of V6 (:mod:`tailtheory.tim.dose`) is in measured k3, not in the noise scale sigma:
the same sigma gives another k3 on another policy (a sharper policy, a larger vocabulary). To
ask whether the threshold k3* moves with size (ledger: "Does the register transfer"), each rung's
GRPO runs on logit noise must sit at the same k3 values, :data:`TARGETS`. This module finds, on a
rung's warm start, the sigma of each target: the mean per-token k3 of the first GRPO batch of the
``matched`` recipe rolled out with Gaussian logit noise at sigma (:func:`batch_k3`), with the same
random numbers at every sigma, found by bisection on ``log sigma`` (:func:`calibrate`). Stored
per rung in ``results/dose_ladder_calibration.json`` (``tailtheory ladder calibrate``); the
training runs at those sigmas are the next step (their arms, the ledger's rule).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from tailtheory.core.estimators import k3
from tailtheory.core.provenance import cpu_model
from tailtheory.engine.rollout.engine import RolloutEngine
from tailtheory.engine.threads import torch_threads
from tailtheory.engine.trainer import rollout_config, rollout_step, step_record
from tailtheory.experiments.ladder import built_names, store_rung, warm_policy
from tailtheory.experiments.presets import train_config

TARGETS = (0.02, 0.065, 0.19, 0.5)
"""Mean per-token k3 values of the ladder's V6 grid (the ``learn`` register's unharmed 0.020 and
0.065, its harmed 0.19, and one above)."""

SIGMA_RANGE = (0.05, 16.0)
"""Bisection bracket of the logit-noise scale."""

ITERATIONS = 10
"""Bisection steps on ``log sigma`` (the bracket's ratio shrinks to 320 ** (1 / 1024))."""

CALIBRATION = "dose_ladder_calibration"


def batch_k3(model, task, cfg, sigma: float) -> float:
    """Mean per-token k3 of the first GRPO batch of ``cfg`` (seed ``cfg.seed``) rolled out with
    Gaussian logit noise at ``sigma`` (0: the float32 sampler), against the trainer."""
    c = replace(cfg, rollout="logit_noise" if sigma > 0 else "kv", rollout_noise=sigma)
    engine = RolloutEngine(model, rollout_config(c, task))
    gen = torch.Generator().manual_seed(c.seed)
    problems, rb, group_ids = rollout_step(0, c, task, model, engine, gen)
    rewards = [task.reward(problems[i // c.group_size], rb.response[i])
               for i in range(rb.response.shape[0])]
    b = step_record(model, rb, rewards, group_ids, c, 0, live=False).b
    return float((k3(b.log_rho.double()) * b.mask).sum() / b.mask.sum())


def calibrate(k3_of, target: float, lo: float = SIGMA_RANGE[0], hi: float = SIGMA_RANGE[1],
              iterations: int = ITERATIONS) -> tuple[float, float]:
    """``(sigma, k3)``: bisection on ``log sigma`` for the sigma whose ``k3_of(sigma)`` is
    ``target`` (``k3_of`` increasing); a target outside the bracket's k3 range is a
    ``ValueError`` naming both ends."""
    k_lo, k_hi = k3_of(lo), k3_of(hi)
    if not k_lo <= target <= k_hi:
        raise ValueError(f"k3 {target:g} lies outside [{k_lo:.3g}, {k_hi:.3g}], the k3 of sigma "
                         f"{lo:g} and {hi:g}")
    best = (lo, k_lo) if abs(k_lo - target) < abs(k_hi - target) else (hi, k_hi)
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        k = k3_of(mid)
        if abs(k - target) < abs(best[1] - target):
            best = (mid, k)
        lo, hi = (mid, hi) if k < target else (lo, mid)
    return best


def measure_noise_sigmas(names: list[str] | None = None, threads: int = 1) -> dict:
    """The sigma of each of :data:`TARGETS` on the warm starts of the built rungs ``names``
    (default: every built rung), stored per rung as each finishes. Nothing is trained."""
    out = {}
    for name in built_names(names):
        cfg = replace(train_config("matched"), rung=name, seed=1)
        model, task, warm = warm_policy(name, cfg)
        cache: dict[float, float] = {}

        def k3_of(sigma: float) -> float:
            if sigma not in cache:
                cache[sigma] = batch_k3(model, task, cfg, sigma)
            return cache[sigma]

        with torch_threads(threads):
            points = {str(t): dict(zip(("sigma", "k3"), calibrate(k3_of, t))) for t in TARGETS}
        out[name] = {"targets": points, "evaluated": {f"{s:.6g}": k for s, k in
                                                     sorted(cache.items())},
                     "warm_key": warm.name, "cpu": cpu_model()}
        store_rung(CALIBRATION, name, out[name],
                   {"targets": list(TARGETS), "range": list(SIGMA_RANGE),
                    "iterations": ITERATIONS, "batch": "matched, seed 1, step 0"},
                   f"tailtheory ladder calibrate --rung {name}")
    return out
