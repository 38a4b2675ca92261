"""LOPTI Figure 1 (a)-(f) and Figure 3 on the warm-started ``kk_trace`` policy (claims L1, L4, L5).

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1 and Figure 3.

GRPO batches (``P`` prompts x ``G`` responses, group-normalised advantages) are sampled from the
warm start by the engine itself (the rollout of :mod:`tailtheory.engine.rollout`, ``pi_old`` and
the advantages of :func:`tailtheory.engine.trainer.step_record`); batch ``i`` of seed ``s`` draws
the problems the trainer draws at step ``i`` of a run with seed ``s``. On every batch, with the
surrogate of :mod:`tailtheory.lopti.probes` (denominator over all response tokens):

- (a) tokens per ``pi_old`` bin; (b) mean advantage per bin (of the ``A > 0`` and ``A < 0`` tokens);
- (c) mean ``Delta pi`` per bin and sign of ``A`` after one SGD step ``theta - lr grad L_all``;
- (d) ``||grad L_b||`` per bin next to ``||grad L_all||``;
- (e), (f) as (c) with only the lowest / only the highest bin's advantages kept;
- Figure 3: among ``A > 0`` tokens, the fraction whose probability rose, per bin, after a GRPO
  step, an AR step (``alpha`` = :data:`ALPHA`) and Lopti's two passes (``eta`` = :data:`ETA`);
- L1: for a few tokens per bin, ``||grad_theta log pi(y_t)||`` over all parameters next to the
  logit-space norm ``||e_k - p||`` (S4: between ``1 - p`` and ``sqrt(2) (1 - p)``).

Sums and counts are stored per batch; a seed's value pools its batches (token-weighted), and
verdicts compare seeds. Criteria, fixed before the measurement was taken (only :data:`SGD_LR`
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

Shapes: per-token tensors ``(B, L)`` aligned with ``input_ids``, prompt then response (token
``t`` scored by the logits at ``t - 1``); ``mask (B, L)`` the response tokens.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.lopti.probes import BIN_EDGES, N_BINS, prob_bins, sequence_logp
from tailtheory.lopti.reweight import advantage_reweight, lopti_passes
from tailtheory.lopti.training import Z_CRIT, compare

SGD_LR = 0.01
"""SGD step of the probes. On the warm start (seed 0, batch 0) lr 0.003 -> 0.01 scaled the
per-bin ``Delta pi`` about in proportion (x2.4 for x3.3), while 0.03 already flipped the sign of
the lowest bin's change: 0.01 is the largest visible step still in the near-linear regime
(mean ``|Delta pi|`` about 2e-3)."""

ALPHA = 0.3
"""AR's alpha: LOPTI's value on Knights and Knaves."""

ETA = 0.5
"""Lopti's threshold: LOPTI's value."""

L1_PER_BIN = 4
"""Tokens per bin and batch whose parameter gradient L1 measures (one backward each)."""

CHUNK_ROWS = 8
"""Rows per forward: rows sorted by length and cut after their last response token (the sums
over tokens are linear, so chunking changes nothing but the cost)."""

PROBE_SIZES = {"quick": {"seeds": (0, 1), "batches": 2}, "full": {"seeds": (0, 1, 2), "batches": 8}}
"""Seeds and batches per seed of each preset; batch sizes are the preset's training sizes."""

PROBE_VERSION = 1
"""Part of the stored measurement's config: bump it when a change here changes the numbers."""

RHO_MIN = 0.5
"""L1: the rank correlation of ``1 - p`` and the gradient norm that counts as scaling."""

CLOSE_MAX, FAR_MIN = 0.5, 1.0
"""L4 (e), (f): relative distance that counts as close / small (below 0.5) and as refuting
(above 1, i.e. no closer than no change at all)."""

METHODS = ("GRPO", "AR", "Lopti")
"""The updates of Figure 3."""

UPDATE_BINS = {"all": None, "lowest": 0, "highest": N_BINS - 1}
"""Figure 1 (c), (e), (f): which bin keeps its advantages (None: all)."""

COMMAND = "TAILTHEORY_PRESET=full python notebooks/04_gradient_dominance.py"
"""The command that regenerates ``results/lopti_probes.json``."""


@dataclass(frozen=True)
class ProbeBatch:
    """One GRPO batch laid out for the probes.

    Shapes: input_ids (B, L) long, attention_mask (B, L) bool, mask (B, L) bool (response
    tokens), adv (B, L) float32 (0 off mask), pi_old (B, L) float64 (1 off mask).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor
    adv: torch.Tensor
    pi_old: torch.Tensor


def _chunks(mask: torch.Tensor, rows: int) -> list[tuple[torch.Tensor, int]]:
    """``(row indices, width)`` of forward chunks: rows sorted by their last response token."""
    end = torch.where(mask.any(1), mask.shape[1] - mask.flip(1).long().argmax(1), 1)  # (B,)
    order = torch.argsort(end)
    return [(idx, int(end[idx].max())) for idx in order.split(rows)]


def _rows(pb: ProbeBatch, idx: torch.Tensor, width: int):
    return (x[idx, :width] for x in (pb.input_ids, pb.attention_mask, pb.mask, pb.adv, pb.pi_old))


@torch.no_grad()
def chunked_probs(model, pb: ProbeBatch, chunk_rows: int = CHUNK_ROWS) -> torch.Tensor:
    """``pi(y_t)`` of every token under ``model`` (0 off ``mask``). Shapes: -> (B, L) float64."""
    out = torch.zeros(pb.mask.shape, dtype=torch.float64)
    for idx, w in _chunks(pb.mask, chunk_rows):
        ids, attn, m, _, _ = _rows(pb, idx, w)
        out[idx, :w] = sequence_logp(model, ids, attn).exp().double() * m
    return out


def surrogate_grads(model, pb: ProbeBatch, terms, chunk_rows: int = CHUNK_ROWS):
    """Flat gradients of ``L = -(1/N) sum_t sel_t A_t pi_theta(y_t) / pi_old(y_t)``, one per
    ``(A, sel)`` of ``terms``, from one forward per chunk; ``N`` counts every response token.

    Source: LOPTI (L4); equals :func:`tailtheory.lopti.probes.bin_gradients` term by term
    (tested). Shapes: terms [(A (B, L), sel (B, L) bool)] -> [(n,)], n parameters.
    """
    params = [q for q in model.parameters() if q.requires_grad]
    n_tok = pb.mask.sum()
    out = [torch.zeros(sum(q.numel() for q in params)) for _ in terms]
    for idx, w in _chunks(pb.mask, chunk_rows):
        ids, attn, m, _, p = _rows(pb, idx, w)
        with torch.enable_grad():
            logp = sequence_logp(model, ids, attn)                          # (b, w)
            ratio = torch.exp(logp - p.log().to(logp.dtype))
            for i, (adv, sel) in enumerate(terms):
                loss = -(ratio * adv[idx, :w] * (m & sel[idx, :w])).sum() / n_tok
                g = torch.autograd.grad(loss, params, retain_graph=i + 1 < len(terms),
                                        allow_unused=True)
                out[i] += torch.cat([(gi if gi is not None else torch.zeros_like(q)).reshape(-1)
                                     for gi, q in zip(g, params)])
    return out


def stepped(model, grad: torch.Tensor, lr: float):
    """A copy of ``model`` after the SGD step ``theta - lr grad`` (``grad`` flat)."""
    new = copy.deepcopy(model)
    params = [q for q in new.parameters() if q.requires_grad]
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(
            torch.nn.utils.parameters_to_vector(params) - lr * grad.to(params[0].dtype), params)
    return new


def update_probes(model, pb: ProbeBatch, lr: float = SGD_LR, alpha: float = ALPHA,
                  eta: float = ETA, chunk_rows: int = CHUNK_ROWS):
    """Figure 1 (c)-(f) and Figure 3 on one batch: ``(norms, delta_pi)``.

    ``norms``: ``{"all": ||grad L_all||, "bins": (4,) ||grad L_b||}``; ``delta_pi``: per-token
    ``Delta pi`` (B, L) after one SGD step with all / the lowest / the highest bin (``all``,
    ``lowest``, ``highest``), after an AR step (``AR``) and after Lopti's two passes (``Lopti``:
    ``pi_old < eta`` first, ``pi_old`` fixed, each pass over all ``N`` tokens). ``model`` is
    not modified. Source: LOPTI (L2, L3, L4, L5).
    """
    bins = prob_bins(pb.pi_old)
    (_, low), (_, high) = lopti_passes(pb.pi_old.log(), pb.mask, eta)
    adv_ar = advantage_reweight(pb.adv.double(), pb.pi_old.log(), alpha).to(pb.adv.dtype)
    terms = [(pb.adv, bins == b) for b in range(N_BINS)] + [(adv_ar, pb.mask), (pb.adv, low)]
    *g_bins, g_ar, g_low = surrogate_grads(model, pb, terms, chunk_rows)
    g_all = torch.stack(g_bins).sum(0)
    before = chunked_probs(model, pb, chunk_rows)
    after = lambda m: chunked_probs(m, pb, chunk_rows) - before  # noqa: E731
    first = stepped(model, g_low, lr)
    g_high, = surrogate_grads(first, pb, [(pb.adv, high)], chunk_rows)
    delta = {u: after(stepped(model, g_all if b is None else g_bins[b], lr))
             for u, b in UPDATE_BINS.items()}
    delta["AR"] = after(stepped(model, g_ar, lr))
    delta["Lopti"] = after(stepped(first, g_high, lr))
    return {"all": g_all.norm(), "bins": torch.stack(g_bins).norm(dim=1)}, delta


def token_grad_norms(model, pb: ProbeBatch, rows: torch.Tensor, cols: torch.Tensor):
    """L1: ``(||grad_theta log pi(y_t)||, ||e_k - softmax(z_{t-1})||)`` of the tokens
    ``(rows[i], cols[i])``; one forward per row, one backward per token.

    Source: LOPTI (L1), S4 for the logit-space norm. Shapes: rows, cols (K,) -> ((K,), (K,)).
    """
    from tailtheory.core.forward import full_forward
    from tailtheory.softmax.scores import score_norm

    params = [q for q in model.parameters() if q.requires_grad]
    param_norm, logit_norm = torch.zeros(len(rows)), torch.zeros(len(rows))
    for r in rows.unique().tolist():
        at = (rows == r).nonzero()[:, 0]                                     # (k,)
        t, w = cols[at], int(cols[at].max()) + 1
        with torch.enable_grad():
            z = full_forward(model, pb.input_ids[r:r + 1, :w], pb.attention_mask[r:r + 1, :w])
            zt, yt = z[0, t - 1].float(), pb.input_ids[r, t]                 # (k, V), (k,)
            lp = torch.log_softmax(zt, -1).gather(-1, yt[:, None])[:, 0]     # (k,)
            for j, i in enumerate(at.tolist()):
                g = torch.autograd.grad(lp[j], params, retain_graph=True, allow_unused=True)
                param_norm[i] = torch.sqrt(sum((gi.double() ** 2).sum() for gi in g
                                               if gi is not None))
        logit_norm[at] = score_norm(zt.detach(), yt).float()
    return param_norm, logit_norm


def _sample_tokens(pb: ProbeBatch, per_bin: int, generator: torch.Generator):
    """Up to ``per_bin`` response tokens of each bin, uniformly at random: ``(rows, cols)``."""
    bins, picked = prob_bins(pb.pi_old), []
    for b in range(N_BINS):
        cand = (pb.mask & (bins == b)).nonzero()                             # (n, 2)
        picked.append(cand[torch.randperm(len(cand), generator=generator)[:per_bin]])
    at = torch.cat(picked)
    return at[:, 0], at[:, 1]


def _bin_sums(x: torch.Tensor, bins: torch.Tensor, sel: torch.Tensor) -> list[float]:
    """Per-bin sum of ``x`` over ``sel``. Shapes: (B, L) each -> 4 floats."""
    s = torch.zeros(N_BINS, dtype=torch.float64).index_add_(0, bins[sel], x[sel].double())
    return s.tolist()


def batch_stats(model, pb: ProbeBatch, lr: float = SGD_LR, l1_per_bin: int = L1_PER_BIN,
                generator: torch.Generator | None = None) -> dict:
    """The stored numbers of one batch: per-bin token counts and sums (never means, so pooling
    batches is exact), gradient norms, and the L1 token sample."""
    bins, m, a = prob_bins(pb.pi_old), pb.mask, pb.adv
    pos, neg, ones = m & (a > 0), m & (a < 0), torch.ones_like(pb.pi_old)
    norms, delta = update_probes(model, pb, lr)
    rows, cols = _sample_tokens(pb, l1_per_bin, generator or torch.Generator().manual_seed(0))
    param_norm, logit_norm = token_grad_norms(model, pb, rows, cols)
    return {"tokens": int(m.sum()), "count": _bin_sums(ones, bins, m),
            "count_pos": _bin_sums(ones, bins, pos), "count_neg": _bin_sums(ones, bins, neg),
            "adv_sum_pos": _bin_sums(a, bins, pos), "adv_sum_neg": _bin_sums(a, bins, neg),
            "norm_all": float(norms["all"]), "norm_bins": norms["bins"].tolist(),
            "dpi_sum": {u: {"pos": _bin_sums(delta[u], bins, pos),
                            "neg": _bin_sums(delta[u], bins, neg)} for u in UPDATE_BINS},
            "rise": {k: _bin_sums((delta[u] > 0).double(), bins, pos)
                     for k, u in zip(METHODS, ("all", "AR", "Lopti"))},
            "l1": {"p": pb.pi_old[rows, cols].tolist(), "param_norm": param_norm.tolist(),
                   "logit_norm": logit_norm.tolist()}}


# ---- sampling batches and measuring --------------------------------------------------------

def probe_batch(model, task, cfg, engine, generator: torch.Generator, index: int) -> ProbeBatch:
    """Batch ``index`` of ``cfg.seed``: the trainer's problems of step ``index``, ``G`` responses
    each from the rollout ``engine``, ``pi_old`` and group advantages as the trainer computes
    them (``cfg.method`` names the advantage, e.g. ``grpo``)."""
    from tailtheory.engine.registry import advantages
    from tailtheory.engine.trainer import PROBLEM_SEED, step_record

    problems = task.problems(cfg.prompts_per_step, seed=PROBLEM_SEED + 100_000 * cfg.seed + index)
    prompts = [p.prompt_ids for p in problems for _ in range(cfg.group_size)]
    group_ids = torch.arange(len(problems)).repeat_interleave(cfg.group_size)   # (B,)
    rb = engine.generate(prompts, eos_id=task.eos_id, pad_id=task.pad_id, generator=generator)
    rewards = [task.reward(problems[i // cfg.group_size], rb.response[i])
               for i in range(rb.response.shape[0])]
    rec = step_record(model, rb, rewards, group_ids, cfg, index, live=False)
    adv, _ = advantages(cfg.spec, rec.b, cfg)                                    # (B, T)
    prompt = torch.zeros(rb.input_ids.shape[0], rb.prompt_len)                   # (B, P)
    mask = torch.cat([prompt.bool(), rb.mask], 1)                                # (B, P+T)
    pi_old = torch.cat([prompt + 1, rec.b.old_logp.exp()], 1).double()
    return ProbeBatch(rb.input_ids, rb.attention_mask, mask,
                      torch.cat([prompt, adv.float()], 1) * mask, torch.where(mask, pi_old, 1.0))


def _check_sizes(seeds, batches: int, lr: float) -> tuple[tuple[int, ...], int, float]:
    from tailtheory.core.checks import check_positive_int

    if (isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__")
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise ValueError(f"seeds must be a sequence of integers >= 0, got {seeds!r}")
    seeds = tuple(seeds)
    if len(set(seeds)) < 2:
        raise ValueError(f"need >= 2 distinct seeds (verdicts compare seeds), got {seeds!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    return seeds, check_positive_int(batches, "batches"), float(lr)


def measure(model, task, cfg, seeds, batches: int, lr: float = SGD_LR,
            l1_per_bin: int = L1_PER_BIN, progress: bool = True) -> dict:
    """``batches`` GRPO batches per seed from ``model`` (sizes, rollout path and temperature of
    the :class:`~tailtheory.engine.config.TrainConfig` ``cfg``), :func:`batch_stats` of each.

    Returns ``{"seeds": [...], "batches": [{"seed", "batch", **batch_stats}, ...]}``.
    """
    from dataclasses import replace

    from tqdm.auto import tqdm

    from tailtheory.engine.rollout import RolloutEngine
    from tailtheory.engine.trainer import rollout_config

    seeds, batches, lr = _check_sizes(seeds, batches, lr)
    model = model.float().eval()
    out = []
    bar = tqdm(total=len(seeds) * batches, desc="lopti probes", unit="batch", disable=not progress)
    for s in seeds:
        c = replace(cfg, seed=s)
        engine, gen = RolloutEngine(model, rollout_config(c, task)), torch.Generator().manual_seed(s)
        for i in range(batches):
            pb = probe_batch(model, task, c, engine, gen, i)
            l1_gen = torch.Generator().manual_seed(1_000_003 * s + i)
            out.append({"seed": s, "batch": i, **batch_stats(model, pb, lr, l1_per_bin, l1_gen)})
            bar.update()
    bar.close()
    return {"seeds": list(seeds), "batches": out}


def probe_config(preset: str = "full") -> dict:
    """What a stored measurement of ``preset`` is keyed by: warm start, sizes, step, thresholds."""
    from tailtheory.engine.presets import TRACE_TASK, check_preset, train_config, warm_sft_config
    from tailtheory.engine.sft import config_hash
    from tailtheory.engine.trainer import PROBLEM_SEED

    check_preset(preset)
    cfg = train_config(preset, method="grpo")
    return {"version": PROBE_VERSION, "task": TRACE_TASK,
            "warm_start": config_hash(warm_sft_config(preset)),
            "seeds": list(PROBE_SIZES[preset]["seeds"]), "batches": PROBE_SIZES[preset]["batches"],
            "prompts_per_step": cfg.prompts_per_step, "group_size": cfg.group_size,
            "max_new_tokens": cfg.max_new_tokens, "rollout": cfg.rollout,
            "temperature": cfg.temperature, "problem_seed": PROBLEM_SEED, "lr": SGD_LR,
            "alpha": ALPHA, "eta": ETA, "bins": list(BIN_EDGES), "l1_per_bin": L1_PER_BIN}


def measure_probes(preset: str, seeds=None, batches: int | None = None,
                   progress: bool = True) -> dict:
    """Measure ``preset`` (its warm start and sizes; ``seeds`` / ``batches`` override
    :data:`PROBE_SIZES`). Nothing is stored: see :func:`probe_data`."""
    from tailtheory.engine.presets import check_preset, train_config, warm_model
    from tailtheory.engine.sft import load_warm_start

    sizes = PROBE_SIZES[check_preset(preset)]
    seeds, batches, _ = _check_sizes(sizes["seeds"] if seeds is None else seeds,
                                     sizes["batches"] if batches is None else batches, SGD_LR)
    model, task = load_warm_start(warm_model(preset, progress=False), device="cpu")  # may train
    return measure(model, task, train_config(preset, method="grpo"), seeds, batches,
                   progress=progress)


def probe_data(profile: str) -> dict:
    """The ``full`` measurement: stored (``quick``) or measured again and stored (``thorough``)."""
    from tailtheory.core.measurements import measured

    return measured("lopti_probes", probe_config("full"), lambda: measure_probes("full"),
                    profile, COMMAND)


def notebook_probe_data(preset: str) -> dict:
    """The notebook's entry: ``quick`` measures the quick warm start (2 seeds x 2 batches, under
    a minute, not stored: a pipeline check); ``full`` measures and stores (:func:`probe_data`)."""
    from tailtheory.engine.presets import check_preset

    return measure_probes("quick") if check_preset(preset) == "quick" else probe_data("thorough")


# ---- per-seed values, verdicts and figures -------------------------------------------------

BIN_LABELS = ("[0,.25]", "(.25,.5]", "(.5,.75]", "(.75,1]")
"""Tick labels of the bins."""


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


def _mean_se(xs) -> tuple[float, float]:
    xs = np.asarray(xs, dtype=float)
    if len(xs) < 2:
        raise ValueError(f"need >= 2 seeds for a standard error, got {len(xs)}")
    return float(xs.mean()), float(xs.std(ddof=1) / np.sqrt(len(xs)))


def _worst(*verdicts: Verdict) -> Verdict:
    """REFUTED beats NOT-REPRODUCED beats TOY-SCALE: a claim with parts needs every part."""
    order = (Verdict.REFUTED, Verdict.NOT_REPRODUCED, Verdict.TOY_SCALE)
    return min(verdicts, key=order.index)


def _small(xs, limit: float = CLOSE_MAX, refute: float = FAR_MIN) -> tuple[float, float, Verdict]:
    """TOY-SCALE when ``mean + 2 se < limit``, REFUTED when ``mean - 2 se > refute``."""
    m, se = _mean_se(xs)
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


def l1_evidence(data: dict) -> Evidence:
    """L1: rank correlation of ``1 - pi_old`` and ``||grad_theta log pi||`` over seeds, and the
    per-bin mean norm decreasing in ``p`` (criterion in the module docstring)."""
    sv = seed_values(data)
    m, se = _mean_se([v["l1"]["rho"] for v in sv.values()])
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
    part_d = _worst(*(c["verdict"] for c in d))
    nums = {"d": str(part_d), "e_rel_dist": e[0], "f_rel_size": f[0],
            "norm_all": float(np.mean([v["norm_all"] for v in sv.values()])),
            **{f"norm_bin{b}": float(np.mean([r["norm"] for r in rows[f"bin{b}"]]))
               for b in range(N_BINS)},
            **{f"d_delta_{b}{b + 1}": c["delta"] for b, c in enumerate(d)},
            **{f"d_se_{b}{b + 1}": c["se"] for b, c in enumerate(d)},
            "e": str(e[2]), "e_se": e[1], "f": str(f[2]), "f_se": f[1], "seeds": len(sv)}
    return Evidence(_worst(part_d, e[2], f[2]), nums,
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
            **{f"{k}_{m}": c[m][k] for m in c for k in ("delta", "se")},
            **{f"rise_top_{m}": top[m] for m in c}, "seeds": len(sv)}
    return Evidence(_worst(*(x["verdict"] for x in c.values())), nums,
                    f"criterion: AR (alpha {ALPHA}) and Lopti (eta {ETA}) each above GRPO by > 2 se "
                    f"over seeds on the top-bin rise fraction; GRPO's level (paper ~0.5) reported")


def summary_table(data: dict):
    """Long table ``seed, quantity, bin, value`` of :func:`seed_values` (bin ``all`` for the
    all-token gradient norm): the data behind both figures."""
    import pandas as pd

    rows = []
    for s, v in seed_values(data).items():
        per_bin = {"token_frac": v["frac"], "adv_mean_pos": v["adv_pos"],
                   "adv_mean_neg": v["adv_neg"], "grad_norm": v["norm_bins"],
                   "l1_param_norm": v["l1"]["param_bins"], "l1_logit_norm": v["l1"]["logit_bins"],
                   **{f"dpi_{u}_{g}": v["dpi"][u][g] for u in UPDATE_BINS for g in ("pos", "neg")},
                   **{f"rise_{m}": v["rise"][m] for m in METHODS}}
        rows += [{"seed": s, "quantity": q, "bin": BIN_LABELS[b], "value": float(x[b])}
                 for q, x in per_bin.items() for b in range(N_BINS)]
        rows.append({"seed": s, "quantity": "grad_norm", "bin": "all", "value": v["norm_all"]})
    return pd.DataFrame(rows)


def _bars(ax, df, quantities: dict, width: float = 0.8) -> None:
    """Grouped bars per bin: seed mean, error bars from the seed minimum to maximum."""
    k = len(quantities)
    for j, (q, label) in enumerate(quantities.items()):
        g = df[df["quantity"] == q].groupby("bin", sort=False)["value"]
        mean, lo, hi = (g.agg(f).reindex(BIN_LABELS).to_numpy() for f in ("mean", "min", "max"))
        x = np.arange(N_BINS) + (j - (k - 1) / 2) * width / k
        ax.bar(x, mean, width / k, label=label, color=f"C{j}",
               yerr=np.clip(np.stack([mean - lo, hi - mean]), 0, None), capsize=2)
    ax.set_xticks(range(N_BINS), BIN_LABELS, fontsize=7)
    ax.set_xlabel("pi_old bin")


def plot_figure1(data: dict):
    """LOPTI Figure 1 analogue, 2 x 3 panels: (a) tokens per bin, (b) mean advantage, (c) / (e)
    / (f) mean ``Delta pi`` after a step on all / the lowest / the highest bin, (d) gradient norm
    per bin (dashed: all tokens). Bars: seed mean; error bars: seed min-max. Returns
    ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = summary_table(data)
    fig, ax = plt.subplots(2, 3, figsize=(12, 6.5))
    signs = lambda u: {f"dpi_{u}_pos": "A > 0", f"dpi_{u}_neg": "A < 0"}  # noqa: E731
    panels = [("(a) fraction of response tokens", {"token_frac": "tokens"}),
              ("(b) mean advantage", {"adv_mean_pos": "A > 0", "adv_mean_neg": "A < 0"}),
              ("(c) mean Delta pi, all bins updated", signs("all")),
              ("(d) ||grad L_b||, only bin b kept", {"grad_norm": "bin b"}),
              ("(e) mean Delta pi, lowest bin only", signs("lowest")),
              ("(f) mean Delta pi, highest bin only", signs("highest"))]
    for a, (title, qs) in zip(ax.flat, panels):
        _bars(a, df, qs)
        a.set_title(title, fontsize=9)
        a.legend(fontsize=7)
    ax[0, 0].set_yscale("log")
    g = df[(df["quantity"] == "grad_norm") & (df["bin"] == "all")]["value"]
    ax[1, 0].axhline(g.mean(), ls="--", color="k", label="all tokens")
    ax[1, 0].axhspan(g.min(), g.max(), color="k", alpha=0.1)
    ax[1, 0].legend(fontsize=7)
    lims = [a.get_ylim() for a in (ax[0, 2], ax[1, 1], ax[1, 2])]
    for a in (ax[0, 2], ax[1, 1], ax[1, 2]):  # one scale: (f) is small next to (c)
        a.set_ylim(min(lo for lo, _ in lims), max(hi for _, hi in lims))
        a.axhline(0, color="k", lw=0.5)
    fig.suptitle(f"LOPTI Fig. 1 analogue: kk_trace warm start, one SGD step (lr {SGD_LR}), "
                 f"{len(data['seeds'])} seeds", fontsize=10)
    fig.tight_layout()
    return fig, df[~df["quantity"].str.startswith(("rise_", "l1_"))].reset_index(drop=True)


def plot_figure3(data: dict):
    """LOPTI Figure 3 analogue: among ``A > 0`` tokens, the fraction whose probability rose,
    per bin, for GRPO, AR and Lopti (left; seed min-max), and the top bin seed by seed (right).
    Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt

    df = summary_table(data)
    df = df[df["quantity"].str.startswith("rise_")].reset_index(drop=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), width_ratios=(2, 1))
    _bars(left, df, {f"rise_{m}": m for m in METHODS})
    top = df[df["bin"] == BIN_LABELS[-1]]
    for j, m in enumerate(METHODS):
        ys = top[top["quantity"] == f"rise_{m}"]["value"]
        right.scatter([j] * len(ys), ys, color=f"C{j}", s=14)
        right.plot([j - 0.2, j + 0.2], [ys.mean()] * 2, color=f"C{j}")
    right.set_xticks(range(len(METHODS)), METHODS)
    right.set_title(f"top bin {BIN_LABELS[-1]}: seeds and mean", fontsize=9)
    left.set_title(f"fraction of A > 0 tokens whose pi rose (AR alpha {ALPHA}, Lopti eta {ETA})",
                   fontsize=9)
    for a in (left, right):
        a.axhline(0.5, ls="--", color="k", lw=0.8)
    left.legend(fontsize=7)
    fig.tight_layout()
    return fig, df
