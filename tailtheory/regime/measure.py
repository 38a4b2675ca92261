"""The regime probe: every quantity of :mod:`tailtheory.regime.quantities` measured on a recipe's
policies, a few GRPO batches each, with no update.

Source: LOPTI (arXiv 2505.12929, Fig. 1(a)), DVP (arXiv 2512.23087, P2), TRM (arXiv 2512.23075,
T12), TIM (arXiv 2605.14220, V2): the quantities; the batches are the trainer's own.

Policies (:data:`POLICIES`): the recipe's warm start (``warm``) and GRPO seed
:data:`~tailtheory.experiments.policies.MID_SEED` half-way through the recipe's steps (``mid``,
trained once by :func:`tailtheory.experiments.policies.mid_policy` and kept in the run cache).
Batch ``i`` of seed ``s`` is what the trainer samples at step ``i`` of a run of seed ``s``
(:func:`~tailtheory.engine.trainer.rollout_step`), on the ``exact`` path: on the ``learn``
recipe these are the batches of the stored LOPTI probes (``results/lopti_probes_learn.json``),
token for token. Per batch (:func:`batch_row`):

- ``pi_old`` bins (LOPTI's four) and ``|A|`` per bin, GRPO's group advantages;
- each response's length and reward (the group's reward variance follows);
- the pruned mass ``m(s) = 1 - pi(S(s)|s)`` of the trainer's distribution at every response
  position for each min-p ``rho`` of :data:`~tailtheory.regime.quantities.RHOS` (DVP's safe set
  from the trainer's own logits: on ``exact`` the sampler's);
- for each real path of :data:`~tailtheory.regime.quantities.PATHS`: the same step sampled on that
  path and ``k3 = rho - 1 - log rho`` of its sampled tokens, ``rho = pi_train / pi_roll`` (the
  trainer's ``mismatch/k3``).

Rows keep sums and counts (never means), so batches pool exactly (:func:`pooled`). Stored as
``results/regime_<recipe>.json`` (:func:`regime_data`; each row with its warm start's provenance;
``tailtheory measure regime_<recipe>`` for each recipe of :data:`COSTS`):
``quick`` reads it, ``thorough`` measures (the ``learn`` recipe: 126 CPU seconds on one thread
for the 24 batches, 274 with the half-way policy trained once).

Shapes: ``B`` responses of ``T`` tokens; per-token ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.lopti.measurement import PROBE_SIZES
from tailtheory.regime.quantities import PATHS, RHOS

VERSION = 1
"""Part of the stored measurement's config: bump it when a change here changes the numbers."""

POLICIES = ("warm", "mid")
"""The probed policies: the warm start and GRPO half-way (the LOPTI probes' two)."""

SEEDS, BATCHES = PROBE_SIZES["learn"]["seeds"], PROBE_SIZES["learn"]["batches"]
"""Seeds and batches per seed: the stored LOPTI probes' (the same batches)."""

COMMAND = measure_command("regime_{recipe}")
"""With the recipe's name put in, measures it again and stores ``results/regime_<recipe>.json``."""


def bin_sums(pi_old, adv, mask) -> tuple[list[int], list[float]]:
    """Per LOPTI bin of ``pi_old`` (:data:`~tailtheory.lopti.probes.BIN_EDGES`): the number of
    response tokens (``mask``) and the sum of their ``|adv|``; all three ``(B, T)``."""
    from tailtheory.lopti.probes import N_BINS, prob_bins

    bins = prob_bins(pi_old.double().clamp(0, 1))                             # (B, T)
    sel = [(bins == b) & mask for b in range(N_BINS)]
    return ([int(s.sum()) for s in sel],
            [float((adv.double().abs() * s).sum()) for s in sel])


@torch.no_grad()
def pruned_sums(model, rb, rhos=RHOS, rows: int | None = None) -> list[float]:
    """``sum_t m(s_t)`` over every response token of ``rb``, one per ``rho``: the trainer's
    min-p safe set (:func:`~tailtheory.core.safeset.keep_from_logp`) and the mass outside it.
    One forward per ``rows`` responses (default: about
    :data:`~tailtheory.core.stats.CHUNK_ELEMENTS` logits a chunk, so a few float64 tensors of that
    size at any vocabulary).

    Source: DVP (P1, P2). Shapes: rb (B responses) -> [len(rhos)] floats."""
    from tailtheory.core.safeset import keep_from_logp
    from tailtheory.core.stats import CHUNK_ELEMENTS
    from tailtheory.engine.forward_stats import batch_rows
    from tailtheory.engine.policy_forward import response_logits

    T, V = rb.response.shape[1], model.get_output_embeddings().weight.shape[0]
    rows = rows or max(1, CHUNK_ELEMENTS // (T * V))
    out = [0.0] * len(rhos)
    for idx in torch.arange(rb.response.shape[0]).split(rows):
        sub = batch_rows(rb, idx, rb.prompt_len, rb.response.shape[1])
        logp = torch.log_softmax(response_logits(model, sub).double(), -1)       # (b, T, V)
        p = logp.exp()                                                           # once, every rho
        for i, rho in enumerate(rhos):
            m = torch.where(keep_from_logp(logp, "min_p", rho), 0.0, p).sum(-1)
            out[i] += float((m * sub.mask).sum())
    return out


def rollout_batch(model, task, cfg, engine, gen, index: int):
    """``(rollout batch, step record)`` of the trainer's step ``index`` under ``cfg``: the batch
    the trainer would sample there with ``engine`` and ``gen``, with its rewards and ``pi_old``
    (:func:`~tailtheory.engine.trainer.step_record`), without an update."""
    from tailtheory.engine.trainer import rollout_step, step_record

    problems, rb, group_ids = rollout_step(index, cfg, task, model, engine, gen)
    G = cfg.group_size
    rewards = [task.reward(problems[i // G], rb.response[i]) for i in range(rb.response.shape[0])]
    return rb, step_record(model, rb, rewards, group_ids, cfg, index, live=False)


def batch_row(model, task, cfg, engines: dict, gens: dict, index: int) -> dict:
    """The regime numbers of batch ``index`` of ``cfg.seed`` (module docstring). ``engines`` and
    ``gens``: a rollout engine and a generator per path (``exact`` and :data:`PATHS`), built by
    :func:`measure_policy`."""
    from tailtheory.core.estimators import k3
    from tailtheory.engine.registry import advantages

    rb, rec = rollout_batch(model, task, cfg, engines["exact"], gens["exact"], index)
    b = rec.b
    adv, _ = advantages(cfg.spec, b, cfg)                                       # (B, T)
    count, adv_abs = bin_sums(b.old_logp.exp(), adv, b.mask)
    row = {"batch": index, "tokens": int(b.mask.sum()), "count": count, "adv_abs_sum": adv_abs,
           "len": b.mask.sum(-1).tolist(), "reward": b.rewards.tolist(),
           "group_size": cfg.group_size,
           "pruned_sum": dict(zip(map(str, RHOS), pruned_sums(model, rb)))}
    for path in PATHS:
        _, r = rollout_batch(model, task, replace(cfg, rollout=path), engines[path], gens[path],
                             index)
        row[f"k3_sum:{path}"] = float((k3(r.b.log_rho.double()) * r.b.mask).sum())
        row[f"tokens:{path}"] = int(r.b.mask.sum())
        row[f"responses:{path}"] = int(r.b.mask.shape[0])
    return row


def measure_policy(model, task, cfg, seeds=SEEDS, batches: int = BATCHES,
                   provenance: dict | None = None, progress: bool = True) -> list[dict]:
    """``batches`` rows (:func:`batch_row`) per seed from ``model`` under the recipe config
    ``cfg`` (its seed replaced by each of ``seeds``), each with ``provenance`` and its CPU
    seconds."""
    from tqdm.auto import tqdm

    from tailtheory.engine.rollout.engine import RolloutEngine
    from tailtheory.engine.trainer import rollout_config

    model = model.float().eval()
    out = []
    bar = tqdm(total=len(seeds) * batches, desc="regime probe", unit="batch", disable=not progress)
    for s in seeds:
        c = replace(cfg, seed=s, rollout="exact")
        cfgs = {"exact": c, **{p: replace(c, rollout=p) for p in PATHS}}
        engines = {p: RolloutEngine(model, rollout_config(x, task)) for p, x in cfgs.items()}
        gens = {p: torch.Generator().manual_seed(s) for p in cfgs}  # as the trainer seeds it
        for i in range(batches):
            t0 = time.process_time()
            row = batch_row(model, task, c, engines, gens, i)
            out.append({"seed": s, **row, "cpu_seconds": time.process_time() - t0,
                        **({"provenance": provenance} if provenance else {})})
            bar.update()
    bar.close()
    return out


def _recipe_cfg(recipe: str):
    from tailtheory.experiments.recipes import recipe_config
    from tailtheory.experiments.policies import MID_SEED

    return recipe_config(recipe, seed=MID_SEED)


def regime_config(recipe: str) -> dict:
    """What ``results/regime_<recipe>.json`` is keyed by: the recipe's fields and warm start,
    the sizes, thresholds, paths and the half-way step."""
    from tailtheory.experiments.recipes import check_recipe
    from tailtheory.engine.load import start_key
    from tailtheory.experiments.policies import MID_SEED
    from tailtheory.lopti.probes import BIN_EDGES

    fields, cfg = check_recipe(recipe), _recipe_cfg(recipe)
    return {"version": VERSION, "recipe": recipe, "fields": dict(fields),
            "warm_start": start_key(cfg), "seeds": list(SEEDS), "batches": BATCHES,
            "rhos": list(RHOS), "paths": list(PATHS), "bins": list(BIN_EDGES),
            "policies": list(POLICIES), "mid_seed": MID_SEED, "mid_step": cfg.steps // 2}


def measure_regime(recipe: str, progress: bool = True) -> dict:
    """Policy -> rows (:func:`measure_policy`) of the recipe's warm start and half-way policy."""
    from tailtheory.core.provenance import provenance, weights_fingerprint
    from tailtheory.engine.load import load_start, start_key
    from tailtheory.engine.threads import model_threads
    from tailtheory.experiments.policies import mid_policy

    cfg = _recipe_cfg(recipe)
    warm, task = load_start(cfg)
    prov = provenance(start_key(cfg), weights_fingerprint(warm))
    out = {}
    for policy in POLICIES:
        model, task = ((warm, task) if policy == "warm"
                       else mid_policy(progress, cfg, cfg.steps // 2))
        with model_threads(model):  # one thread for a small model (engine.threads)
            out[policy] = measure_policy(model, task, cfg, provenance=prov, progress=progress)
    return out


def regime_data(recipe: str, profile: str = "quick") -> dict:
    """The stored probe of ``recipe`` (``quick``; missing or stale: an error naming
    :data:`COMMAND`) or a new one, stored (``thorough``). An unknown recipe is a ``ValueError``
    listing the valid ones."""
    from tailtheory.core.measurements import StaleMeasurement, measured, measurement_path

    name, config, command = f"regime_{recipe}", regime_config(recipe), COMMAND.format(recipe=recipe)
    if profile == "quick" and not measurement_path(name).exists():
        raise StaleMeasurement(f"no stored measurement {measurement_path(name)}; measure it "
                               f"with: {command}")
    return measured(name, config, lambda: measure_regime(recipe), profile, command)


def remake(recipe: str) -> None:
    """Measure ``recipe`` again on one thread and store ``results/regime_<recipe>.json`` (what
    ``tailtheory measure regime_<recipe>`` runs); prints the CPU seconds it took."""
    from tailtheory.engine.threads import torch_threads

    t0 = time.process_time()
    with torch_threads(1):
        regime_data(recipe, "thorough")
    print(f"stored results/regime_{recipe}.json ({time.process_time() - t0:.0f} CPU s)")


COSTS = {"learn": "about 2 CPU minutes on one thread (126 s for the 24 batches; 274 s with the "
                  "half-way policy trained once)",
         "matched": "about 13 CPU minutes on one thread (775 s recorded for the 24 batches)"}
"""What measuring each stored recipe again costs (module docstring, the stored rows' seconds)."""

MEASURES = {recipe: register_measure(Measure(
    f"regime_{recipe}", f"the regime quantities (LOPTI's bins, DVP's pruned mass, TRM's and "
    f"TIM's k3 per path) on the {recipe} recipe's warm start and half-way policy", cost,
    lambda r=recipe: regime_config(r), lambda r=recipe: remake(r)))
    for recipe, cost in COSTS.items()}
