"""Decisiveness on GRPO batches: which of a policy's low-probability tokens decide the answer.

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1(a) and (d): its bins of ``pi_old``,
here each split into decisive and free tokens by :mod:`tailtheory.lopti.decisive.branches`.

:func:`measure_decisiveness` samples GRPO batches from a policy as the trainer would (the
problems of step ``i`` of seed ``s``, :func:`tailtheory.lopti.onestep.probe_batch`), keeps the
first :data:`PROBE_PROMPTS` prompts' responses, and probes a stratified sample of their tokens:
every token of the lowest bin ``[0, 0.25]`` and :data:`OTHERS` of the rest drawn uniformly, each
weighted back by the inverse of its sampling fraction. Each probed token keeps ``p``, its bin,
its advantage, its role (:func:`token_roles`: the ``kk`` tasks' grammar, otherwise ``None``), and
the branch estimate ``D``, ``gap`` and their standard errors. A token is *decisive* when
``D >= tau`` (:data:`TAU`, in reward units, calibrated once on ``kk_prose``'s known free slots,
:mod:`tailtheory.lopti.decisive.calibration`).

Shapes: ``B`` responses, ``T`` response tokens.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.engine.devices import model_generator
from tailtheory.engine.rollout.engine import RolloutEngine
from tailtheory.engine.tasks.knights_knaves import ROLES, kk_word_roles
from tailtheory.engine.tasks.chat import before_stop
from tailtheory.engine.threads import model_threads
from tailtheory.engine.trainer import rollout_config, step_problems
from tailtheory.lopti.decisive.branches import SAMPLERS, branch_values
from tailtheory.lopti.onestep import ProbeBatch, probe_batch, surrogate_grads
from tailtheory.lopti.probes import N_BINS, prob_bins

PROBE_PROMPTS = 8
"""Prompts of a GRPO batch whose responses are probed (``G`` responses each)."""

OTHERS = 96
"""Tokens above the lowest bin probed per batch (drawn uniformly, weighted back)."""

FREE_ROLES = ("synonym", "order")
"""The roles whose choice the reward never reads (``kk_prose``)."""


def token_words(task, ids: list[int]) -> list[int]:
    """For each id of a response (up to EOS, excluded), the index of the whitespace-separated
    word of the decoded text it belongs to, read from the decoded prefixes (so it holds for a
    tokenizer that joins words by spaces and for one whose pieces carry them): a token that ends
    on or inside a word counts for the last word so far; one of spaces alone for the next."""
    out = []
    for k in range(len(ids)):
        text = task.decode(ids[:k + 1])
        n = len(text.split())
        out.append(n if text[-1:].isspace() or n == 0 else n - 1)
    return out


def token_roles(task, response: list[int]) -> list[str] | None:
    """The role (:data:`~tailtheory.engine.tasks.knights_knaves.ROLES`) of each token of
    ``response`` (ids, EOS included if sampled) on a ``kk`` task: its word's role; EOS and what
    follows the grammar's end are ``scaffold`` / ``off_path``. ``None`` for other tasks."""
    name = getattr(task, "name", "")
    if not name.startswith("kk"):
        return None
    body = before_stop(list(response), task.stop_ids)
    body = list(response) if body is None else body
    words = task.decode(body).split() if body else []
    if name in ("kk", "kk_knights"):   # every answer word decides (kk_knights: EOS too)
        ok = ("T", "F") if name == "kk" else tuple(f"P{i}" for i in range(task.n_people))
        word_roles = ["fork" if w in ok else "junk" for w in words[:task.n_people]]
        word_roles += ["off_path"] * (len(words) - len(word_roles))
    else:
        word_roles = kk_word_roles(words, task.n_people, task.depth, name == "kk_prose",
                                   task.words)
    idx = token_words(task, body)
    roles = [word_roles[w] if w < len(word_roles) else "off_path" for w in idx]
    if len(body) < len(response):                                  # EOS: the format's end,
        roles.append("fork" if name == "kk_knights" and len(words) < task.n_people
                     else "scaffold")                              # or a choice to stop
    return roles + ["off_path"] * (len(response) - len(roles))


def probe_positions(pi_old: torch.Tensor, mask: torch.Tensor, others: int,
                    generator: torch.Generator, low_max: int | None = None
                    ) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Every lowest-bin token of ``mask`` (at most ``low_max`` of them, drawn without
    replacement, when given) and ``others`` of the rest drawn without replacement: ``((row, t)
    list, weight per position)``; a weight is the inverse of its stratum's sampled fraction (1
    for a lowest bin probed whole). Positions are in row-major order within each stratum.
    Shapes: pi_old, mask (B, T)."""
    bins = prob_bins(pi_old.double().clamp(0, 1))
    low_all = (mask & (bins == 0)).nonzero()
    rest = (mask & (bins > 0)).nonzero()
    n_low = len(low_all) if low_max is None else min(check_positive_int(low_max, "low_max"),
                                                       len(low_all))
    low = _draw_rows(low_all, n_low, generator) if n_low < len(low_all) else low_all.tolist()
    k = min(int(others), len(rest))
    pick = rest[torch.randperm(len(rest), generator=generator)[:k]].tolist() if k else []
    w = np.concatenate([np.full(len(low), len(low_all) / max(len(low), 1)),
                        np.full(k, len(rest) / max(k, 1))])
    return [tuple(x) for x in low + pick], w


def _draw_rows(rows: torch.Tensor, k: int, generator: torch.Generator) -> list:
    """``k`` of ``rows`` drawn without replacement, kept in their order."""
    keep = torch.randperm(len(rows), generator=generator)[:k].sort().values
    return rows[keep].tolist()


def measure_decisiveness(model, task, cfg, seeds=(1,), batches: int = 1, K: int = 32,
                         others: int = OTHERS, prompts: int = PROBE_PROMPTS,
                         tau: float | None = None, progress: bool = True,
                         sampler: str = SAMPLERS[0], low_max: int | None = None) -> dict:
    """Probe ``batches`` GRPO batches per seed of the :class:`~tailtheory.engine.config.TrainConfig`
    ``cfg`` (task, sizes, temperature) from ``model`` (module docstring), the branches paired by
    ``sampler`` (:data:`~tailtheory.lopti.decisive.branches.SAMPLERS`), at most ``low_max``
    lowest-bin tokens a batch (:func:`probe_positions`; default all). Returns
    ``{"tokens": [per probed token dict], "batches": [per batch counts]}``: each token with
    ``seed``, ``batch``, ``row``, ``prompt`` (``row // G``), ``t``, ``p`` (``pi_old``), ``bin``,
    ``adv``, ``role``, ``weight``, ``D``, ``D_se``, ``gap``, ``gap_se``, ``effect``; each batch
    with its response-token counts per bin (of the probed prompts' responses) and per bin and
    role."""
    K = check_positive_int(K, "K", 2)
    prompts = check_positive_int(prompts, "prompts")
    model = model.float().eval()
    tokens, counts = [], []
    with model_threads(model):
        for s in seeds:
            c = replace(cfg, seed=s)
            engine = RolloutEngine(model, rollout_config(c, task))
            gen = model_generator(model, s)
            for i in range(batches):
                tokens_i, counts_i = _one_batch(model, task, c, engine, gen, i, K, others,
                                                prompts, tau, progress, sampler, low_max)
                tokens += tokens_i
                counts.append({"seed": s, "batch": i, **counts_i})
    return {"K": K, "tokens": tokens, "batches": counts}


def _one_batch(model, task, cfg, engine, gen, i, K, others, prompts, tau, progress, sampler,
               low_max=None):
    pb = probe_batch(model, task, cfg, engine, gen, i)
    G = cfg.group_size
    n = min(prompts, cfg.prompts_per_step) * G
    P, resp_mask, pi_old, responses = batch_responses(pb, n)
    adv = pb.adv[:n, P:]
    problems = step_problems(i, cfg, task)
    probs = [problems[b // G] for b in range(n)]
    pos, w = probe_positions(pi_old, resp_mask, others,
                             torch.Generator().manual_seed(7919 * cfg.seed + i), low_max)
    rc = rollout_config(cfg, task)
    out = branch_values(model, task, probs, responses, pos, K, rc.max_new_tokens,
                        rc.temperature, seed=1_000 * cfg.seed + i, progress=progress,
                        sampler=sampler)
    roles = [token_roles(task, r) for r in responses]
    bins = prob_bins(pi_old.double().clamp(0, 1))
    toks = []
    for k, (b, t) in enumerate(pos):
        toks.append({"seed": cfg.seed, "batch": i, "row": b, "prompt": b // G, "t": t,
                     "p": float(pi_old[b, t]), "bin": int(bins[b, t]), "adv": float(adv[b, t]),
                     "role": None if roles[b] is None else roles[b][t], "weight": float(w[k]),
                     **{q: float(out[q][k]) for q in ("D", "D_se", "gap", "gap_se", "effect",
                                                       "q_with", "q_without")}})
    per_bin = [int((resp_mask & (bins == b)).sum()) for b in range(N_BINS)]
    per_role = {r: [0] * N_BINS for r in ROLES}
    for b in range(n):
        for t in range(len(responses[b])):
            if roles[b] is not None:
                per_role[roles[b][t]][int(bins[b, t])] += 1
    counts = {"responses": n, "count": per_bin, "count_role": per_role}
    if tau is not None:
        sub = ProbeBatch(*(x[:n] for x in (pb.input_ids, pb.attention_mask, pb.mask, pb.adv,
                                           pb.pi_old)))
        counts["norms"] = split_norms(model, sub, P, toks, tau)
    return toks, counts


def batch_responses(pb: ProbeBatch, n: int) -> tuple:
    """The first ``n`` rows of a probe batch as responses: ``(P, mask (n, T), pi_old (n, T),
    responses)``, ``P`` the first response column, ``responses`` each row's sampled ids up to
    and including EOS (the ``mask``)."""
    P = int(pb.mask.any(0).nonzero().min())
    mask, pi_old = pb.mask[:n, P:], pb.pi_old[:n, P:]
    return P, mask, pi_old, [pb.input_ids[b, P:][mask[b]].tolist() for b in range(n)]


def split_norms(model, pb: ProbeBatch, P: int, toks: list[dict], tau: float) -> dict:
    """Figure 1(d) split in two: per bin, ``||grad L||`` of the bin's tokens (``bin``), of its
    probed decisive tokens (``D >= tau``) and of its probed free ones, each probed token's
    advantage weighted back by its ``weight`` (so each part estimates the sum over its stratum).
    The surrogate is :func:`~tailtheory.lopti.onestep.surrogate_grads`' (denominator: every
    response token of ``pb``). Returns lists of 4 floats under ``bin``, ``decisive``, ``free``."""
    bins = prob_bins(pb.pi_old)
    shape = pb.adv.shape
    parts = {"decisive": torch.zeros(shape), "free": torch.zeros(shape)}
    for t in toks:
        part = "decisive" if t["D"] >= tau else "free"
        parts[part][t["row"], P + t["t"]] = t["weight"]
    terms = [(pb.adv, pb.mask & (bins == b)) for b in range(N_BINS)]
    for part in ("decisive", "free"):
        w = parts[part].to(pb.adv.dtype)
        terms += [(pb.adv * w, pb.mask & (bins == b) & (w > 0)) for b in range(N_BINS)]
    g = torch.stack(surrogate_grads(model, pb, terms)).norm(dim=1).tolist()
    return {"bin": g[:N_BINS], "decisive": g[N_BINS:2 * N_BINS], "free": g[2 * N_BINS:]}
