"""Each effect against model size: the per-rung measurements of the model-size ladder and their
trend verdicts (criteria in the ledger, fixed before any rung above the base was measured).

Every trained-model claim of the ``matched`` recipe (L1, L4, L5 from LOPTI, arXiv 2505.12929;
M7, V2 from TIM, arXiv 2605.14220; P4 from DVP, arXiv 2512.23087) is measured on one size. Here
each is measured on every built rung's ``kk_prose`` warm start with the ``matched`` recipe's
probe sizes and rules unchanged, and one number per effect and seed (:data:`EFFECTS`) goes into
a trend over the rungs (:func:`tailtheory.ladder.trend.size_trend`).

Six parts, stored per rung, part and seed in ``results/ladder_effects.json`` as each finishes:

- ``tail`` (M7, V2): the warm start answers :data:`PROMPTS` held-out prompts on each real
  rollout path of :data:`TAIL_PATHS` (sample seed = the seed); each sampled token's ``|Delta|``
  against the float32 trainer and its ``k3``, the mean ``|Delta|`` in the fixed bins of ``1 - p``
  of :data:`Q_EDGES`; and M7's envelope slope on 32 x 64 tokens of the policy's own text.
  ``kv`` is float32 reduction-order noise, labelled so wherever it is drawn.
- ``p4``: DVP's sweep on the bf16 rollouts of the same prompts
  (:func:`tailtheory.pruning.trained_tails.rollout_setting`); the effect is the share of the
  sequence KL removed at the largest ``rho`` whose mean pruned mass is at most 1e-3.
- ``lopti``: LOPTI's one-step probes (:func:`tailtheory.lopti.measurement.measure`) on
  :data:`LOPTI_BATCHES` GRPO batches of the seed.
- ``decisive``: what the lowest bin's tokens do at this rung (the ``matched`` store's
  decisiveness probe, :func:`decisive_numbers`): a fact of the rung's regime beside its bin
  shares, reported per rung, not a trend verdict.
- ``lopti_decide``: the ``lopti`` part on the ``decide`` recipe's warm start at two sizes
  (:mod:`tailtheory.ladder.decide`: its lowest-bin tokens decide the answer).
- ``step``: the GRPO step's speed on the rung's warm start
  (:func:`tailtheory.ladder.speed.step_numbers`): response tokens/s, update's share of peak.

Seeds: :data:`SEEDS`. At the base and the top rung a seed is an independent warm start (SFT seed
``seed - 1`` from the rung's corpus LM, built when missing); between them the probe seeds of one
warm start. Size is confounded with training state (the larger rungs repeat the corpus): every
trend is read beside the rungs' held-out perplexity.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import torch

from tailtheory.core.estimators import k3
from tailtheory.core.provenance import check_one_start, cpu_model, weights_fingerprint
from tailtheory.core.stats import token_stats
from tailtheory.ladder.trend import size_trend
from tailtheory.engine.devices import model_generator
from tailtheory.engine.policy_forward import response_logits
from tailtheory.engine.rollout.engine import HF, RolloutConfig, RolloutEngine
from tailtheory.engine.start.rungs import RUNGS, rung
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.start.warm_cache import cache_root as warm_root
from tailtheory.engine.start.warm_cache import load_warm_start, warm_start
from tailtheory.engine.threads import pinned_threads
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.ladder.build import require_built, store_rung, stored
from tailtheory.experiments.policies import grpo_config
from tailtheory.lopti.decisive import calibration as cal
from tailtheory.lopti.decisive.probe import OTHERS, measure_decisiveness
from tailtheory.lopti.decisive.store import PROMPTS as DECISIVE_PROMPTS
from tailtheory.lopti.decisive.store import decisive_share
from tailtheory.lopti.measurement import measure, seed_effects
from tailtheory.lopti.probes import N_BINS, prob_bins
from tailtheory.mismatch.claims import envelope_slope
from tailtheory.mismatch.real import paired_logits, policy_windows
from tailtheory.pruning.claims import MASS_NEGLIGIBLE
from tailtheory.pruning.trained_tails import TrainedP4Config, rollout_setting, trained_knees
from tailtheory.ladder.decide import decide_numbers, decide_policy
from tailtheory.ladder.decide import PART as DECIDE_PART
from tailtheory.ladder.mismatch import MIN_RUNGS, MIN_SEEDS, stored_data
from tailtheory.ladder.speed import step_numbers

STORE = "ladder_effects"
"""``results/ladder_effects.json``: rung -> part -> seed -> that seed's numbers."""

PARTS = ("tail", "p4", "lopti", "decisive", "step", DECIDE_PART)
SEEDS = (1, 2, 3)
TAIL_PATHS = ("bf16", "fp16", "fp8", "kv")
Q_EDGES = (1e-4, 1e-3, 1e-2, 0.1, 1.0)
"""Fixed bins of ``1 - p`` of the sampled token: [1e-4, 1e-3), [1e-3, 1e-2), [1e-2, 0.1),
[0.1, 1] (fixed at every size, so a bin's share of tokens may move while its bounds do not)."""
PROMPTS, PROMPT_SEED = 64, 202
"""Held-out ``kk_prose`` prompts of the ``tail`` and ``p4`` parts (P4's own on ``matched``)."""
WINDOWS = (32, 64)
"""M7's teacher-forced windows of the policy's own text (its size on ``matched``)."""
LOPTI_BATCHES = 4
"""GRPO batches per seed of the ``lopti`` part (``matched``'s probe size)."""

EFFECTS = {
    "L1 Spearman": ("lopti", "l1_rho", 0.03), "L1 slope": ("lopti", "l1_slope", 0.05),
    "L4 (d)": ("lopti", "l4_d", 0.02), "L4 (e)": ("lopti", "l4_e", 0.05),
    "L4 (f)": ("lopti", "l4_f", 0.02), "L5 AR": ("lopti", "l5_AR", 0.005),
    "L5 Lopti": ("lopti", "l5_Lopti", 0.005), "M7 slope": ("tail", "m7_slope", 0.03),
    "V2 low-p": ("tail", "v2_low", 0.05), "P4 removed": ("p4", "p4_removed", 0.02)}
"""Effect -> (part, key of the seed's numbers, ``delta`` per decade): the ledger's criteria."""


def independent(name: str) -> bool:
    """Whether rung ``name``'s seeds are independent warm starts (the base and the top rung)."""
    return name in (RUNGS[0].name, RUNGS[-1].name)


def policy(name: str, seed: int, progress: bool = True) -> tuple:
    """``(model, task, warm_key)``: the warm start rung ``name``'s seed ``seed`` is measured on.
    The rung must be built (``tailtheory ladder build``); an extra SFT seed at the base or top
    rung is trained here when the cache lacks it."""
    cfg = rung(name).warm()
    require_built(name, warm_root() / config_hash(cfg) / "sft.json")
    if independent(name):
        cfg = replace(cfg, seed=cfg.seed + seed - SEEDS[0])
    path = warm_start(cfg, progress=progress)
    model, task = load_warm_start(path, device="cpu")
    return model, task, path.name


def _prompts(task) -> list:
    return [p.prompt_ids for p in task.problems(PROMPTS, seed=PROMPT_SEED)]


def q_bins(delta: torch.Tensor, q: torch.Tensor) -> list[dict]:
    """Tokens and mean ``|delta|`` in each fixed bin of :data:`Q_EDGES` of ``q = 1 - p`` (a bin
    ``[lo, hi)``, the last one closed; tokens below the first edge are in none). Shapes: (N,)."""
    delta, q = delta.cpu(), q.cpu()
    edges = torch.tensor(Q_EDGES, dtype=torch.float64)
    which = torch.bucketize(q.double(), edges[1:-1], right=True)        # bin b: [e_b, e_b+1)
    out = []
    for b in range(len(Q_EDGES) - 1):
        m = (which == b) & (q >= edges[0])
        out.append({"lo": Q_EDGES[b], "hi": Q_EDGES[b + 1], "tokens": int(m.sum()),
                    "mean_abs": float(delta.abs()[m].mean()) if m.any() else math.nan})
    return out


def policy_facts(p: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor) -> dict:
    """A rung's regime: the share of sampled response tokens per LOPTI ``pi_old`` bin (``p``:
    the trainer's probability of each, (N,)), their mean entropy (nats) and the mean response
    length (``mask``: (B, T))."""
    counts = torch.bincount(prob_bins(p.double().cpu()), minlength=N_BINS).double()
    return {"bin_fractions": (counts / counts.sum()).tolist(),
            "entropy": float(entropy.double().mean()),
            "length": float(mask.sum(1).double().mean())}


def tail_numbers(model, task, seed: int) -> dict:
    """The ``tail`` part of one seed: per path of :data:`TAIL_PATHS` the sampled tokens'
    ``|Delta|`` (mean, max, per fixed bin of ``1 - p``), mean ``k3`` and M7's envelope slope;
    ``m7_slope`` (bf16's) and ``v2_low`` (``log10`` of bf16's mean ``|Delta|`` in the last bin);
    ``policy``: :func:`policy_facts` of the float32 (``kv``) sampler's tokens."""
    prompts, out = _prompts(task), {"paths": {}}
    ids = policy_windows(model, task, *WINDOWS, sample_seed=seed)
    for path in TAIL_PATHS:
        rc = RolloutConfig(path=path, max_new_tokens=task.max_response_len, backend=HF)
        rb = RolloutEngine(model, rc).generate(prompts, eos_id=task.stop_ids, pad_id=task.pad_id,
                                               generator=model_generator(model, seed))
        with torch.no_grad():
            st = token_stats(response_logits(model, rb), rb.response)
        train = st["logp"].double()
        delta = (rb.logp.double() - train)[rb.mask]                      # (N,) roll - train
        if path == "kv":                      # the float32 sampler: the policy's own regime
            out["policy"] = policy_facts(train[rb.mask].exp(), st["entropy"][rb.mask], rb.mask)
        slope, n_bins = envelope_slope(*paired_logits(model, ids, path))
        out["paths"][path] = {"tokens": int(delta.numel()), "mean_abs": float(delta.abs().mean()),
                              "max_abs": float(delta.abs().max()), "k3": float(k3(-delta).mean()),
                              "bins": q_bins(delta, -torch.expm1(train[rb.mask])),
                              "envelope_slope": slope, "envelope_bins": n_bins}
    low = out["paths"]["bf16"]["bins"][-1]["mean_abs"]
    out["m7_slope"] = out["paths"]["bf16"]["envelope_slope"]
    out["v2_low"] = math.log10(low) if low > 0 else math.nan
    return out


def p4_numbers(model, task, seed: int) -> dict:
    """The ``p4`` part of one seed: DVP's knee on the bf16 rollouts (sample seed ``seed``)."""
    cfg = TrainedP4Config(sample_seed=seed, prompt_seed=PROMPT_SEED, policy_prompts=PROMPTS)
    setting = rollout_setting(model, _prompts(task), task.stop_ids, task.pad_id,
                              task.max_response_len, cfg)
    knee = trained_knees({"settings": {"policy": setting}}, MASS_NEGLIGIBLE, ("policy",))["policy"]
    return {"knee": knee, "sampled": setting["sampled"][0],
            "p4_removed": 1.0 - float(knee["seq_kl_left"])}


def lopti_numbers(model, task, seed: int, batches: int = LOPTI_BATCHES, cfg=None,
                  progress: bool = False) -> dict:
    """The ``lopti`` part of one seed: :func:`~tailtheory.lopti.measurement.seed_effects` of
    ``batches`` one-step probes on GRPO batches of seed ``seed`` (``cfg``: a ``TrainConfig``
    for their sizes; default the ``matched`` recipe's)."""
    data = measure(model, task, cfg or grpo_config("matched"), (seed,), batches,
                   progress=progress, min_seeds=1)
    return seed_effects(data)[seed]


def decisive_numbers(model, task, seed: int, cfg=None, prompts: int = DECISIVE_PROMPTS) -> dict:
    """The ``decisive`` part of one seed: what the lowest bin's tokens do at this rung, the
    ``matched`` store's probe (:func:`~tailtheory.lopti.decisive.probe.measure_decisiveness`,
    its calibrated ``tau`` and ``K``, ``prompts`` prompts of one GRPO batch of seed ``seed``;
    ``cfg``: a ``TrainConfig`` for the batch, default the ``matched`` recipe's), summarised as
    :func:`~tailtheory.lopti.decisive.store.decisive_share` does: the lowest bin's
    ``token_frac``, ``decisive_share`` (NaN below the reporting floor of 200 tokens of 40
    prompts, the counts in ``share_note``), excess mean ``D``, ``helps``, ``hurts`` and
    ``format_breaking``."""
    cfg = cfg or grpo_config("matched")
    data = measure_decisiveness(model, task, cfg, (seed,), 1, cal.K, OTHERS, prompts, cal.TAU,
                                progress=False)
    return decisive_share({"policy": data}, cfg.group_size)["policy"]


MEASURE = {"tail": tail_numbers, "p4": p4_numbers, "lopti": lopti_numbers,
           "decisive": decisive_numbers, "step": step_numbers, DECIDE_PART: decide_numbers}


def measure_effects(names: list[str] | None = None, parts=PARTS, seeds=SEEDS, threads: int = 1,
                    progress: bool = True) -> dict:
    """Measure ``parts`` x ``seeds`` on the built rungs ``names`` (default: every built one),
    skipping what is stored, storing each (rung, part, seed) as it finishes with the seconds it
    took (``seconds``: wall time on ``threads`` threads, whatever else the machine was doing;
    ``threads`` holds the count: every choice of a thread count inside is pinned to it).
    Returns the store."""
    for part in parts:
        if part not in MEASURE:
            raise ValueError(f"unknown part {part!r}; valid: {', '.join(PARTS)}")
    names = names or [r.name for r in RUNGS if r.name in stored()]
    for name in names:
        for seed in seeds:
            todo = [p for p in parts if str(seed) not in read().get(name, {}).get(p, {})]
            for group in ([p for p in todo if p != DECIDE_PART], [p for p in todo
                                                                 if p == DECIDE_PART]):
                if group:
                    model, task, key = (decide_policy(name, progress) if group == [DECIDE_PART]
                                        else policy(name, seed, progress))
                    weights = weights_fingerprint(model)
                    check_same_start(name, key, weights, seed)
                for part in group:
                    t0 = time.perf_counter()
                    with pinned_threads(threads):
                        row = MEASURE[part](model, task, seed)
                    _store(name, part, seed, {**row, "warm_key": key, "weights": weights,
                                              "cpu": cpu_model(),
                                              "seconds": round(time.perf_counter() - t0, 1),
                                              "threads": threads})
    return read()


def check_same_start(name: str, key: str, weights: str, seed: int) -> None:
    """Refuse to add to rung ``name`` a row measured on warm start ``key`` with other ``weights``
    than its stored rows of that key record (:class:`~tailtheory.core.provenance.MixedStarts`): a
    warm start rebuilt on another CPU is another model, and a rung's seeds from two models measure
    neither. Rows stored before fingerprints were recorded are not compared."""
    rows = [(part, {"seed": int(seed), "provenance": {
        "start": r["warm_key"], "weights": r["weights"], "cpu": r.get("cpu", "?")}})
        for part, seeds in read().get(name, {}).items() if isinstance(seeds, dict)
        for seed, r in seeds.items()
        if isinstance(r, dict) and r.get("warm_key") == key and "weights" in r]
    rows.append(("(being measured)", {"seed": seed, "provenance": {
        "start": key, "weights": weights, "cpu": cpu_model()}}))
    check_one_start(rows, f"{STORE} rung {name}",
                    f"Measure the rung's parts again on one warm start (remove its rows of warm "
                    f"start {key} from results/{STORE}.json first).")


def read() -> dict:
    """``results/ladder_effects.json``'s data: rung -> part -> seed (a string) -> numbers."""
    return stored_data(STORE)


def effects_config() -> dict:
    """What ``results/ladder_effects.json`` is keyed by: the parts' sizes and the seeds."""
    return {"prompts": PROMPTS, "prompt_seed": PROMPT_SEED, "windows": list(WINDOWS),
            "q_edges": list(Q_EDGES), "lopti_batches": LOPTI_BATCHES, "seeds": list(SEEDS)}


def _store(name: str, part: str, seed: int, row: dict) -> None:
    value = read().get(name, {})
    value.setdefault(part, {})[str(seed)] = row
    store_rung(STORE, name, value, effects_config(), measure_command(STORE))


STORE_MEASURE = register_measure(Measure(
    STORE, "L1, L4, L5, M7, V2, P4, the decisive share, the step's speed and the decide recipe's "
    "probes on the first builds, per rung, part and seed, rows naming no model: a record of the "
    "first rule, superseded by ladder_probes on named models"))


def trends(data: dict | None = None) -> dict[str, dict]:
    """Effect -> its per-rung seed values, means and spread, and the trend verdict over the
    rungs with at least :data:`MIN_SEEDS` seeds (``verdict`` says what is missing when fewer
    than :data:`MIN_RUNGS` rungs have them); ``partial``: the seed values of rungs with fewer,
    outside the trend."""
    data, built = read() if data is None else data, stored()
    out = {}
    for effect, (part, key, delta) in EFFECTS.items():
        rows, partial = [], []
        for r in RUNGS:
            vals = [v[key] for v in data.get(r.name, {}).get(part, {}).values()
                    if isinstance(v, dict) and math.isfinite(v.get(key, math.nan))]
            if len(vals) >= MIN_SEEDS and r.name in built:
                rows.append({"rung": r.name, "params": built[r.name]["non_embedding_params"],
                             "values": vals, "mean": float(np.mean(vals)),
                             "sd": float(np.std(vals, ddof=1))})
            elif vals:
                partial.append({"rung": r.name, "values": vals})
        res = {"part": part, "delta": delta, "rungs": rows, "partial": partial}
        if len(rows) >= MIN_RUNGS:
            t = size_trend([r["params"] for r in rows], [r["mean"] for r in rows], delta)
            res.update(verdict=t.verdict, slope=t.slope, low=t.low, high=t.high)
        else:
            res["verdict"] = f"PENDING ({len(rows)} of {MIN_RUNGS} rungs measured)"
        out[effect] = res
    return out


def trend_table(data: dict | None = None) -> str:
    """:func:`trends` as text: per effect, each rung's mean (sd, seeds) and the verdict."""
    lines = []
    for effect, t in trends(data).items():
        cells = ", ".join(f"{r['rung']} {r['mean']:.3g} (sd {r['sd']:.2g}, {len(r['values'])})"
                          for r in t["rungs"]) or "no rung with 3 seeds"
        slope = (f"; slope {t['slope']:+.3g} per decade ({t['low']:+.3g} to {t['high']:+.3g}), "
                 f"delta {t['delta']:g}" if "slope" in t else "")
        part = "".join(f"; {r['rung']} " + ", ".join(f"{v:.3g}" for v in r["values"])
                       + f" ({len(r['values'])} of {MIN_SEEDS} seeds, not in the trend)"
                       for r in t["partial"])
        lines.append(f"{effect:11s} {t['verdict']}{slope}: {cells}{part}")
    return "\n".join(lines)


def by_rung(part: str, keys: tuple, data: dict | None = None) -> dict[str, dict]:
    """Rung -> the means over the stored seeds of ``part``'s ``keys``, and ``seeds``, for the
    rungs that have it (the ``decisive`` and ``step`` parts: facts per rung, no trend)."""
    data = read() if data is None else data
    out = {}
    for r in RUNGS:
        rows = list(data.get(r.name, {}).get(part, {}).values())
        if rows:
            out[r.name] = {k: float(np.mean([x[k] for x in rows])) for k in keys} | {
                "seeds": len(rows)}
    return out


def decisive_by_rung(data: dict | None = None) -> dict[str, dict]:
    """:func:`by_rung` of the ``decisive`` part: ``decisive_share`` and ``token_frac``."""
    return by_rung("decisive", ("decisive_share", "token_frac"), data)


def part_seconds(data: dict | None = None) -> str:
    """One line: each stored part's CPU-minutes a seed per rung (the median over the seeds that
    recorded ``seconds``, so that one seed timed on a crowded machine does not set the cost; one
    thread, on whatever machine measured it)."""
    data, cells = read() if data is None else data, []
    for r, part in ((r, p) for r in RUNGS for p in PARTS):  # rungs in the ladder's order
        secs = [x["seconds"] for x in data.get(r.name, {}).get(part, {}).values()
                if isinstance(x, dict) and isinstance(x.get("seconds"), (int, float))]
        cells += [f"{r.name} {part} {np.median(secs) / 60:.1f} ({len(secs)})"] if secs else []
    return "CPU-minutes a seed of each part (seeds timed): " + (", ".join(cells) or "none timed")
