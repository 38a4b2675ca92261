"""The recipes' shared policies: a recipe's warm start and its half-way GRPO policy.

Several sections probe the same two policies of a recipe (LOPTI's one-step probes, P4's and
M7's tail probes on the ``matched`` recipe, the regime table), so they live here, below the
sections, once.

- ``warm``: the recipe's warm start (:func:`tailtheory.engine.load.load_start`).
- ``mid``: GRPO seed :data:`MID_SEED` of the recipe half-way (:func:`mid_step`):
  that run is trained again to the step in a folder of its own under the run cache's
  ``probes/`` (the run cache keeps a run's last checkpoint only), and its metric lines are
  checked equal to the cached full run's first ones (:func:`mid_policy`).

A row measured on either names the model it measured as the recipe's warm start (the half-way
policy's start) and the machine (:func:`policy_measured_on`).
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.provenance import measured_on, weights_fingerprint
from tailtheory.engine.checkpoint import read_checkpoint, read_metrics
from tailtheory.engine.load import load_start
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.trainer import train
from tailtheory.experiments.presets import RECIPE_PRESETS, train_config, warm_sft_config
from tailtheory.experiments.recipes import check_recipe
from tailtheory.experiments.runs import run_key, runs_root

MID_SEED = 1
"""The GRPO run whose half-way policy is probed."""

MID_STEP = 60
"""Half of the ``learn`` and ``matched`` recipes' 120 steps (:func:`mid_step`)."""


def mid_step(recipe: str) -> int:
    """The half-way step of ``recipe``'s GRPO run: half its steps (:data:`MID_STEP` for the
    ``learn`` and ``matched`` recipes; 100 of the ``decide`` recipe's 200)."""
    return check_recipe(recipe)["steps"] // 2

POLICIES = ("warm", "mid")
"""The probed policies."""


def grpo_config(recipe: str = "learn"):
    """The GRPO run of ``recipe`` whose half-way policy is probed (seed :data:`MID_SEED`), on the
    CPU: the stored measurements keyed by this run (:func:`policies_identity`) were made on
    CPU-trained policies, and a machine with a GPU must read them as the same, not as stale."""
    if recipe not in RECIPE_PRESETS:
        raise ValueError(f"unknown recipe {recipe!r} for the probes; valid: "
                         f"{', '.join(RECIPE_PRESETS)}")
    return train_config(recipe, method="grpo", seed=MID_SEED, device="cpu")


def mid_policy(progress: bool = True, cfg=None, step: int = MID_STEP):
    """``(model, task)``: the run ``cfg`` (default: GRPO seed :data:`MID_SEED` of the ``learn``
    recipe) after ``step`` steps, trained (once; kept under the run cache's ``probes/`` folder)
    and checked against the cached full run's first lines when that run exists (a
    ``RuntimeError`` if they differ). Any recipe's config serves (the ``matched`` recipe's probes,
    the regime probe's half-way policy, :mod:`tailtheory.regime.measure`)."""
    cfg = cfg or grpo_config()
    out = runs_root().parent / "probes" / f"mid_{run_key(cfg)}_{step}"
    ckpt = out / "checkpoint.pt"
    if not ckpt.exists() or read_checkpoint(ckpt)["step"] != step:
        train(replace(cfg, steps=step, out=str(out), checkpoint_every=step),
              resume=ckpt.exists(), progress=progress)
    full = runs_root() / run_key(cfg)
    if (full / "metrics.jsonl").exists():
        mine, theirs = read_metrics(out), read_metrics(full)[:step]
        # timings differ; metrics added to the engine after the cached run was made are absent
        shared = {k for m in theirs for k in m if not k.startswith("time/")}
        same = lambda m: {k: m.get(k) for k in shared}  # noqa: E731
        if len(theirs) == step and [same(m) for m in mine] != [same(m) for m in theirs]:
            raise RuntimeError(f"the half-way policy in {out} does not retrace the cached run "
                               f"{full}: its metric lines differ; delete {out} and run again")
    model, task = load_start(cfg)  # the recipe's warm start and its task, as the run began
    model.load_state_dict(read_checkpoint(ckpt)["model"])
    return model, task


def probed_policy(policy: str, recipe: str = "learn", progress: bool = True) -> tuple:
    """``(model, task)`` of one of :data:`POLICIES` on ``recipe``: its warm start, or GRPO seed
    :data:`MID_SEED` half-way (:func:`mid_step`, :func:`mid_policy`). The policies every probe of
    a recipe reads (LOPTI's one-step probes, P4's and M7's on the ``matched`` recipe)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
    cfg = grpo_config(recipe)
    return load_start(cfg) if policy == "warm" else mid_policy(progress, cfg, mid_step(recipe))


def policy_measured_on(policy: str, model, recipe: str = "learn") -> dict:
    """``{"weights", "machine"}`` that a row measured on ``model``, the ``policy`` of ``recipe``
    (:func:`probed_policy`), names (:func:`~tailtheory.core.provenance.measured_on`): both policies
    by the recipe's warm start, the half-way policy by the model its run started from (loaded
    here: the model at hand is the trained one), and the machine ``model`` is on."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
    start = None if policy == "warm" else weights_fingerprint(load_start(grpo_config(recipe))[0])
    return measured_on(model, start)


def policies_identity(recipe: str = "learn") -> dict:
    """What a measurement on ``recipe``'s two policies is keyed by: the task, the warm start's
    hash, the GRPO run of the half-way policy and its step."""
    cfg = grpo_config(recipe)
    return {"task": cfg.task, "warm_start": config_hash(warm_sft_config(recipe)),
            "mid_run": run_key(cfg), "mid_step": mid_step(recipe)}
