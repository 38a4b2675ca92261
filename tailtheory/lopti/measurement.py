"""The stored one-step measurement of LOPTI's Figures 1 and 3 and what it shows (claims L1, L4,
L5): which batches, stored where, pooled per seed, judged how.

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1 and Figure 3.

:func:`measure` samples ``batches`` GRPO batches per seed from the warm-started ``kk_trace``
policy (batch ``i`` of seed ``s`` draws the problems the trainer draws at step ``i`` of a run
with seed ``s``) and keeps :func:`tailtheory.lopti.onestep.batch_stats` of each. The ``full``
preset's measurement is stored (``results/lopti_probes.json``, keyed by :func:`probe_config`;
``tailtheory measure lopti_probes`` makes it again): ``quick`` reads it, ``thorough`` measures
again (about 6 minutes). Sums and counts are stored per
batch; :func:`seed_values` pools a seed's batches (token-weighted), and verdicts compare seeds.
Figures: :mod:`tailtheory.lopti.figures`.

Criteria, fixed before the measurement was taken (only :data:`~tailtheory.lopti.onestep.SGD_LR`
was chosen on one exploratory batch; ``se`` = standard error over seeds, ``Z_CRIT`` = 2 as in
:mod:`tailtheory.lopti.training`):

- **L1** ``rho_s`` = Spearman correlation of ``1 - pi_old`` and the parameter-gradient norm on
  seed ``s``'s token sample. TOY-SCALE when ``mean(rho) - 2 se > RHO_MIN`` and the seed-mean
  norm decreases strictly from bin 0 to bin 3; REFUTED when ``mean(rho) + 2 se < 0``;
  NOT-REPRODUCED otherwise.
- **L4** (d) every ``norm_b - norm_{b+1}`` > 2 se (REFUTED if one is < -2 se); (e)
  ``r_e = ||v_e - v_c|| / ||v_c||`` over bins 1-3 (the bins (e) does not update), ``v`` the
  mean ``Delta pi`` per bin and sign; (f) ``r_f = ||v_f|| / ||v_c||`` over all bins. (e), (f):
  TOY-SCALE when ``mean + 2 se < CLOSE_MAX``, REFUTED when ``mean - 2 se > FAR_MIN``. L4 is the
  worst of (d), (e), (f).
- **L5** AR and Lopti each beat GRPO on the top-bin rise fraction by > 2 se (REFUTED if one is
  below by > 2 se); GRPO's own top-bin value (paper: about 0.5) is reported, not judged.
"""

from __future__ import annotations

import numpy as np
import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.measurements import measured
from tailtheory.core.provenance import measured_on
from tailtheory.core.registry import Evidence, Verdict
from tailtheory.engine.devices import model_generator
from tailtheory.engine.rollout.engine import RolloutEngine
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.start.warm_cache import load_warm_start
from tailtheory.engine.threads import model_threads
from tailtheory.engine.trainer import PROBLEM_SEED, rollout_config
from tailtheory.experiments.comparison import Z_CRIT, compare, mean_se, worst
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.presets import check_preset, train_config, warm_sft_config
from tailtheory.lopti.onestep import (ALPHA, ETA, L1_PER_BIN, METHODS, SGD_LR, UPDATE_BINS,
                                      batch_stats, probe_batch)
from tailtheory.lopti.probes import BIN_EDGES, N_BINS, prob_bins

PROBE_SIZES = {"quick": {"seeds": (0, 1), "batches": 2}, "full": {"seeds": (0, 1, 2), "batches": 8},
               "learn": {"seeds": (1, 2, 3), "batches": 4},
               "matched": {"seeds": (1, 2, 3), "batches": 4},
               "decide": {"seeds": (1, 2, 3), "batches": 4}}
"""Seeds and batches per seed of each preset; batch sizes are the preset's training sizes
(``learn`` and ``matched``: 32 prompts x 8 responses a batch,
:mod:`tailtheory.lopti.learn_probes`)."""

PROBE_VERSION = 1
"""Part of the stored measurement's config: bump it when a change here changes the numbers."""

COMMAND = measure_command("lopti_probes")
"""The command that regenerates ``results/lopti_probes.json``."""

RHO_MIN = 0.5
"""L1: the rank correlation of ``1 - p`` and the gradient norm that counts as scaling."""

CLOSE_MAX, FAR_MIN = 0.5, 1.0
"""L4 (e), (f): relative distance that counts as close / small (below 0.5) and as refuting
(above 1, i.e. no closer than no change at all)."""


def _check_sizes(seeds, batches: int, lr: float,
                 min_seeds: int = 2) -> tuple[tuple[int, ...], int, float]:
    if (isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__")
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise ValueError(f"seeds must be a sequence of integers >= 0, got {seeds!r}")
    seeds = tuple(seeds)
    if len(set(seeds)) < min_seeds or len(set(seeds)) < len(seeds):
        raise ValueError(f"need >= {min_seeds} distinct seeds (verdicts compare seeds), got "
                         f"{seeds!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    return seeds, check_positive_int(batches, "batches"), float(lr)


def measure(model, task, cfg, seeds, batches: int, lr: float = SGD_LR,
            l1_per_bin: int = L1_PER_BIN, progress: bool = True, min_seeds: int = 2) -> dict:
    """``batches`` GRPO batches per seed from ``model`` (sizes, rollout path and temperature of
    the :class:`~tailtheory.engine.config.TrainConfig` ``cfg``), :func:`batch_stats` of each.
    ``min_seeds``: 1 for one seed of a measurement whose seeds are pooled elsewhere (the
    model-size ladder's, where a seed may be its own warm start).

    Returns ``{"seeds": [...], "batches": [{"seed", "batch", **batch_stats}, ...]}``.
    """
    from dataclasses import replace

    from tqdm.auto import tqdm


    seeds, batches, lr = _check_sizes(seeds, batches, lr, min_seeds)
    model = model.float().eval()
    out = []
    bar = tqdm(total=len(seeds) * batches, desc="lopti probes", unit="batch", disable=not progress)
    with model_threads(model):  # torch's default count runs 10x+ slower on shared cores
        for s in seeds:
            c = replace(cfg, seed=s)
            engine = RolloutEngine(model, rollout_config(c, task))
            gen = model_generator(model, s)
            for i in range(batches):
                pb = probe_batch(model, task, c, engine, gen, i)
                l1_gen = torch.Generator().manual_seed(1_000_003 * s + i)
                stats = batch_stats(model, pb, lr, l1_per_bin, l1_gen)
                out.append({"seed": s, "batch": i, **stats})
                bar.update()
    bar.close()
    return {"seeds": list(seeds), "batches": out}


def probe_config(preset: str = "full") -> dict:
    """What a stored measurement of ``preset`` is keyed by: warm start, sizes, step, thresholds."""

    check_preset(preset)
    cfg = train_config(preset, method="grpo")
    return {"version": PROBE_VERSION, "task": cfg.task,
            "warm_start": config_hash(warm_sft_config(preset)),
            "seeds": list(PROBE_SIZES[preset]["seeds"]), "batches": PROBE_SIZES[preset]["batches"],
            "prompts_per_step": cfg.prompts_per_step, "group_size": cfg.group_size,
            "max_new_tokens": cfg.max_new_tokens, "rollout": cfg.rollout,
            "temperature": cfg.temperature, "problem_seed": PROBLEM_SEED, "lr": SGD_LR,
            "alpha": ALPHA, "eta": ETA, "bins": list(BIN_EDGES), "l1_per_bin": L1_PER_BIN}


def measure_probes(preset: str, seeds=None, batches: int | None = None,
                   progress: bool = True) -> dict:
    """Measure ``preset`` (its warm start and sizes; ``seeds`` / ``batches`` override
    :data:`PROBE_SIZES`), naming the warm start's fingerprint and the machine beside the seeds
    and batches (:func:`~tailtheory.core.provenance.measured_on`). Nothing is stored: see
    :func:`probe_data`."""
    from tailtheory.experiments.presets import check_preset, train_config, warm_model

    sizes = PROBE_SIZES[check_preset(preset)]
    seeds, batches, _ = _check_sizes(sizes["seeds"] if seeds is None else seeds,
                                     sizes["batches"] if batches is None else batches, SGD_LR)
    model, task = load_warm_start(warm_model(preset, progress=False), device="cpu")  # may train
    named = measured_on(model)                                  # before any probe step
    data = measure(model, task, train_config(preset, method="grpo"), seeds, batches,
                   progress=progress)
    return {**data, **named}


def probe_data(profile: str) -> dict:
    """The ``full`` measurement: stored (``quick``) or measured again and stored (``thorough``)."""
    return measured("lopti_probes", probe_config("full"), lambda: measure_probes("full"),
                    profile, COMMAND)


def notebook_probe_data(preset: str) -> dict:
    """The notebook's entry: ``quick`` measures the quick warm start (2 seeds x 2 batches, under
    a minute, not stored: a pipeline check); ``full`` measures and stores (:func:`probe_data`)."""
    return measure_probes("quick") if check_preset(preset) == "quick" else probe_data("thorough")


# ---- per-seed values and verdicts ----------------------------------------------------------

def _pooled(rows: list[dict], get, count) -> np.ndarray:
    """Token-weighted pooling over batches: ``sum get / sum count`` per bin (NaN for none)."""
    num = np.sum([get(r) for r in rows], 0)
    den = np.sum([count(r) for r in rows], 0)
    return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    import pandas as pd

    return float(np.corrcoef(pd.Series(x).rank(), pd.Series(y).rank())[0, 1])


def _l1_values(rows: list[dict]) -> dict:
    p = np.concatenate([r["l1"]["p"] for r in rows])
    pn, ln = (np.concatenate([r["l1"][k] for r in rows]) for k in ("param_norm", "logit_norm"))
    b = prob_bins(torch.as_tensor(p)).numpy()
    per_bin = lambda x: [float(x[b == k].mean()) if (b == k).any() else np.nan  # noqa: E731
                         for k in range(N_BINS)]
    q = np.clip(1 - p, 1e-12, None)
    return {"rho": _spearman(q, pn), "rho_logit": _spearman(q, ln), "n": len(p),
            "slope": float(np.polyfit(np.log(q), np.log(np.clip(pn, 1e-30, None)), 1)[0]),
            "param_bins": per_bin(pn), "logit_bins": per_bin(ln)}


def seed_values(data: dict) -> dict[int, dict]:
    """Seed -> its batches pooled: token fractions, mean advantages, gradient norms, mean
    ``Delta pi`` per update and sign, rise fractions per method (all per bin), L1 values."""
    out = {}
    for s in data["seeds"]:
        rows = [r for r in data["batches"] if r["seed"] == s]
        if not rows:
            raise ValueError(f"the measurement has no batch of seed {s}")
        cnt = lambda k: (lambda r: r[k])  # noqa: E731
        out[s] = {"frac": _pooled(rows, cnt("count"), lambda r: [r["tokens"]] * N_BINS),
                  "adv_pos": _pooled(rows, cnt("adv_sum_pos"), cnt("count_pos")),
                  "adv_neg": _pooled(rows, cnt("adv_sum_neg"), cnt("count_neg")),
                  "norm_all": float(np.mean([r["norm_all"] for r in rows])),
                  "norm_bins": np.mean([r["norm_bins"] for r in rows], 0),
                  "dpi": {u: {g: _pooled(rows, lambda r, u=u, g=g: r["dpi_sum"][u][g],
                                         cnt(f"count_{g}")) for g in ("pos", "neg")}
                          for u in UPDATE_BINS},
                  "rise": {m: _pooled(rows, lambda r, m=m: r["rise"][m], cnt("count_pos"))
                           for m in METHODS},
                  "l1": _l1_values(rows)}
    return out


def _seed_mean_se(xs) -> tuple[float, float]:
    """Mean and standard error over seeds (:func:`tailtheory.experiments.comparison.mean_se`); a
    verdict needs at least two seeds."""
    if len(xs) < 2:
        raise ValueError(f"need >= 2 seeds for a standard error, got {len(xs)}")
    return mean_se(xs)


def _small(xs, limit: float = CLOSE_MAX, refute: float = FAR_MIN) -> tuple[float, float, Verdict]:
    """TOY-SCALE when ``mean + 2 se < limit``, REFUTED when ``mean - 2 se > refute``."""
    m, se = _seed_mean_se(xs)
    v = (Verdict.TOY_SCALE if m + Z_CRIT * se < limit else
         Verdict.REFUTED if m - Z_CRIT * se > refute else Verdict.NOT_REPRODUCED)
    return m, se, v


def _dpi_vector(sv: dict, update: str, bins) -> np.ndarray:
    return np.concatenate([sv["dpi"][update][g][list(bins)] for g in ("pos", "neg")])


def _rel(a: np.ndarray, b: np.ndarray, size: bool = False) -> float:
    """``||a - b|| / ||b||`` (``size``: ``||a|| / ||b||``) over the entries finite in both."""
    ok = np.isfinite(a) & np.isfinite(b)
    den = np.linalg.norm(b[ok])  # 0 when no advantage was non-zero (the quick warm start)
    return float(np.linalg.norm(a[ok] - (0 if size else b[ok])) / den) if den > 0 else np.nan


def seed_effects(data: dict) -> dict:
    """Seed -> the one number per effect that the model-size ladder follows across rungs, each
    computed as its claim's evidence computes it: ``l1_rho`` (Spearman of ``1 - pi_old`` and the
    gradient norm), ``l1_slope`` (its log-log slope), ``l4_d`` (the lowest bin's norm over all
    tokens'), ``l4_e`` (``||v_low - v_all|| / ||v_all||`` on bins 1-3), ``l4_f`` (``||v_high|| /
    ||v_all||``), ``l5_AR`` and ``l5_Lopti`` (top-bin rise fraction minus GRPO's)."""
    out = {}
    for seed, v in seed_values(data).items():
        out[seed] = {"l1_rho": float(v["l1"]["rho"]), "l1_slope": float(v["l1"]["slope"]),
                     "l4_d": float(v["norm_bins"][0] / v["norm_all"]) if v["norm_all"] > 0
                     else float("nan"),
                     "l4_e": _rel(_dpi_vector(v, "lowest", range(1, N_BINS)),
                                  _dpi_vector(v, "all", range(1, N_BINS))),
                     "l4_f": _rel(_dpi_vector(v, "highest", range(N_BINS)),
                                  _dpi_vector(v, "all", range(N_BINS)), size=True),
                     **{f"l5_{m}": float(v["rise"][m][-1] - v["rise"]["GRPO"][-1])
                        for m in ("AR", "Lopti")}}
    return out


def l1_evidence(data: dict) -> Evidence:
    """L1: rank correlation of ``1 - pi_old`` and ``||grad_theta log pi||`` over seeds, and the
    per-bin mean norm decreasing in ``p`` (criterion in the module docstring)."""
    sv = seed_values(data)
    m, se = _seed_mean_se([v["l1"]["rho"] for v in sv.values()])
    bins = np.mean([v["l1"]["param_bins"] for v in sv.values()], 0)
    logit = np.mean([v["l1"]["logit_bins"] for v in sv.values()], 0)
    decreasing = bool(np.all(np.diff(bins) < 0))
    verdict = (Verdict.TOY_SCALE if m - Z_CRIT * se > RHO_MIN and decreasing else
               Verdict.REFUTED if m + Z_CRIT * se < 0 else Verdict.NOT_REPRODUCED)
    nums = {"rho_mean": m, "rho_se": se,
            "rho_logit_mean": float(np.mean([v["l1"]["rho_logit"] for v in sv.values()])),
            "loglog_slope_mean": float(np.mean([v["l1"]["slope"] for v in sv.values()])),
            **{f"param_norm_bin{b}": float(bins[b]) for b in range(N_BINS)},
            **{f"logit_norm_bin{b}": float(logit[b]) for b in range(N_BINS)},
            "tokens": int(sum(v["l1"]["n"] for v in sv.values())), "seeds": len(sv)}
    return Evidence(verdict, nums, f"criterion: Spearman(1 - p, ||grad_theta log pi||) - 2 se > "
                    f"{RHO_MIN} over seeds and the per-bin mean norm decreasing in p; "
                    f"{L1_PER_BIN} tokens per bin and batch")


def l4_evidence(data: dict) -> Evidence:
    """L4: (d) per-bin gradient norms decrease in b; (e) lowest-only moves the other bins like
    all; (f) highest-only moves little (criterion in the module docstring)."""
    sv = seed_values(data)
    rows = {f"bin{b}": [{"norm": v["norm_bins"][b]} for v in sv.values()] for b in range(N_BINS)}
    d = [compare(rows, f"bin{b}", f"bin{b + 1}", "norm") for b in range(N_BINS - 1)]
    e = _small([_rel(_dpi_vector(v, "lowest", range(1, N_BINS)),
                     _dpi_vector(v, "all", range(1, N_BINS))) for v in sv.values()])
    f = _small([_rel(_dpi_vector(v, "highest", range(N_BINS)), _dpi_vector(v, "all", range(N_BINS)),
                     size=True) for v in sv.values()])
    part_d = worst(*(c.verdict for c in d))
    nums = {"d": str(part_d), "e_rel_dist": e[0], "f_rel_size": f[0],
            "norm_all": float(np.mean([v["norm_all"] for v in sv.values()])),
            **{f"norm_bin{b}": float(np.mean([r["norm"] for r in rows[f"bin{b}"]]))
               for b in range(N_BINS)},
            **{f"d_delta_{b}{b + 1}": c.delta for b, c in enumerate(d)},
            **{f"d_se_{b}{b + 1}": c.se for b, c in enumerate(d)},
            "e": str(e[2]), "e_se": e[1], "f": str(f[2]), "f_se": f[1], "seeds": len(sv)}
    return Evidence(worst(part_d, e[2], f[2]), nums,
                    f"criterion: (d) norm_b - norm_b+1 > 2 se for b = 0, 1, 2; (e) ||v_low - "
                    f"v_all|| / ||v_all|| over bins 1-3 and (f) ||v_high|| / ||v_all|| below "
                    f"{CLOSE_MAX} by 2 se (v: mean Delta pi per bin and sign of A); SGD lr {SGD_LR}")


def l5_evidence(data: dict) -> Evidence:
    """L5: top-bin rise fraction of ``A > 0`` tokens, AR and Lopti against GRPO over seeds."""
    sv = seed_values(data)
    rows = {m: [{"top": float(v["rise"][m][-1])} for v in sv.values()] for m in METHODS}
    c = {m: compare(rows, m, "GRPO", "top") for m in ("AR", "Lopti")}
    top = {m: float(np.mean([r["top"] for r in rows[m]])) for m in METHODS}
    nums = {"rise_top_GRPO": top["GRPO"],
            **{f"{k}_{m}": getattr(c[m], k) for m in c for k in ("delta", "se")},
            **{f"rise_top_{m}": top[m] for m in c}, "seeds": len(sv)}
    return Evidence(worst(*(x.verdict for x in c.values())), nums,
                    f"criterion: AR (alpha {ALPHA}) and Lopti (eta {ETA}) each above GRPO by > 2 se "
                    f"over seeds on the top-bin rise fraction; GRPO's level (paper ~0.5) reported")


MEASURE = register_measure(Measure(
    "lopti_probes", "LOPTI's one-step probes of Figures 1 and 3 (L1, L4, L5) on the full "
    "preset's warm start, 3 seeds x 8 batches", "about 6 CPU minutes",
    lambda: probe_config("full"), lambda: probe_data("thorough")))
