"""One SGD step on one GRPO batch of the warm start: what LOPTI's Figures 1 and 3 draw (L1, L4, L5).

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1 and Figure 3.

A batch (:class:`ProbeBatch`, built by :func:`probe_batch`) is ``P`` prompts x ``G`` responses
sampled from the warm start by the engine itself: the trainer's problems and rollout of that step
(:func:`tailtheory.engine.trainer.rollout_step`), ``pi_old`` and the advantages of
:func:`tailtheory.engine.trainer.step_record`. On it, with the surrogate of
:mod:`tailtheory.lopti.probes` (denominator over all response tokens; computed here chunk by
chunk, one forward per chunk, and tested equal to the probes' reference):

- (a) tokens per ``pi_old`` bin; (b) mean advantage per bin (of the ``A > 0`` and ``A < 0`` tokens);
- (c) mean ``Delta pi`` per bin and sign of ``A`` after one SGD step ``theta - lr grad L_all``;
- (d) ``||grad L_b||`` per bin next to ``||grad L_all||``;
- (e), (f) as (c) with only the lowest / only the highest bin's advantages kept;
- Figure 3: among ``A > 0`` tokens, the fraction whose probability rose, per bin, after a GRPO
  step, an AR step (``alpha`` = :data:`ALPHA`) and Lopti's two passes (``eta`` = :data:`ETA`);
- L1: for a few tokens per bin, ``||grad_theta log pi(y_t)||`` over all parameters next to the
  logit-space norm ``||e_k - p||`` (S4: between ``1 - p`` and ``sqrt(2) (1 - p)``).

:func:`batch_stats` keeps sums and counts per bin (never means), so that batches pool exactly;
which batches are measured and how they are stored and pooled: :mod:`tailtheory.lopti.measurement`.

Shapes: per-token tensors ``(B, L)`` aligned with ``input_ids``, prompt then response (token
``t`` scored by the logits at ``t - 1``); ``mask (B, L)`` the response tokens.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from tailtheory.core.forward import full_forward, hidden_forward
from tailtheory.engine.registry import advantages
from tailtheory.engine.trainer import rollout_step, step_record
from tailtheory.engine.types import MethodParams
from tailtheory.lopti.probes import N_BINS, fused_sequence_logp, prob_bins, sequence_logp
from tailtheory.lopti.reweight import advantage_reweight, lopti_passes
from tailtheory.softmax.scores import score_norm

SGD_LR = 0.01
"""SGD step of the probes. On the warm start (seed 0, batch 0) lr 0.003 -> 0.01 scaled the
per-bin ``Delta pi`` about in proportion (x2.4 for x3.3), while 0.03 already flipped the sign of
the lowest bin's change: 0.01 is the largest visible step still in the near-linear regime
(mean ``|Delta pi|`` about 2e-3)."""

ALPHA = MethodParams.alpha
"""AR's alpha: the engine's, LOPTI's value on Knights and Knaves (0.3)."""

ETA = MethodParams.eta
"""Lopti's threshold: the engine's, LOPTI's value (0.5)."""

L1_PER_BIN = 4
"""Tokens per bin and batch whose parameter gradient L1 measures (one backward each)."""

CHUNK_ROWS = 8
"""Rows per forward: rows sorted by length and cut after their last response token (the sums
over tokens are linear, so chunking changes nothing but the cost)."""

METHODS = ("GRPO", "AR", "Lopti")
"""The updates of Figure 3."""

UPDATE_BINS = {"all": None, "lowest": 0, "highest": N_BINS - 1}
"""Figure 1 (c), (e), (f): which bin keeps its advantages (None: all)."""

HEADS = {"full": sequence_logp, "fused": fused_sequence_logp}
"""How every forward here turns hidden states into log-probs: ``full`` (the model's logits
``(B, L, V)``, then ``token_stats``: the reference, and what the stored measurements used) or
``fused`` (``fused_sequence_logp``: no ``(B, L, V)`` tensor, for large vocabularies; equal to
float32 rounding, tested)."""


def _logp_fn(head: str):
    if head not in HEADS:
        raise ValueError(f"head must be one of {tuple(HEADS)}, got {head!r}")
    return HEADS[head]


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


def probe_batch(model, task, cfg, engine, generator: torch.Generator, index: int) -> ProbeBatch:
    """Batch ``index`` of ``cfg.seed``: the trainer's problems and rollout of step ``index``
    (``G`` responses each from the rollout ``engine``), ``pi_old`` and group advantages as the
    trainer computes them (``cfg.method`` names the advantage, e.g. ``grpo``)."""

    problems, rb, group_ids = rollout_step(index, cfg, task, model, engine, generator)
    rewards = [task.reward(problems[i // cfg.group_size], rb.response[i])
               for i in range(rb.response.shape[0])]
    rec = step_record(model, rb, rewards, group_ids, cfg, index, live=False)
    adv, _ = advantages(cfg.spec, rec.b, cfg)                                    # (B, T)
    prompt = torch.zeros(rb.input_ids.shape[0], rb.prompt_len, device=rb.mask.device)  # (B, P)
    mask = torch.cat([prompt.bool(), rb.mask], 1)                                # (B, P+T)
    pi_old = torch.cat([prompt + 1, rec.b.old_logp.exp()], 1).double()
    return ProbeBatch(rb.input_ids, rb.attention_mask, mask,
                      torch.cat([prompt, adv.float()], 1) * mask, torch.where(mask, pi_old, 1.0))


def _chunks(mask: torch.Tensor, rows: int) -> list[tuple[torch.Tensor, int]]:
    """``(row indices, width)`` of forward chunks: rows sorted by their last response token."""
    end = torch.where(mask.any(1), mask.shape[1] - mask.flip(1).long().argmax(1), 1)  # (B,)
    order = torch.argsort(end)
    return [(idx, int(end[idx].max())) for idx in order.split(rows)]


def _rows(pb: ProbeBatch, idx: torch.Tensor, width: int):
    return (x[idx, :width] for x in (pb.input_ids, pb.attention_mask, pb.mask, pb.adv, pb.pi_old))


@torch.no_grad()
def chunked_probs(model, pb: ProbeBatch, chunk_rows: int = CHUNK_ROWS,
                  head: str = "full") -> torch.Tensor:
    """``pi(y_t)`` of every token under ``model`` (0 off ``mask``). Shapes: -> (B, L) float64."""
    logp = _logp_fn(head)
    out = torch.zeros(pb.mask.shape, dtype=torch.float64, device=pb.mask.device)
    for idx, w in _chunks(pb.mask, chunk_rows):
        ids, attn, m, _, _ = _rows(pb, idx, w)
        out[idx, :w] = logp(model, ids, attn).exp().double() * m
    return out


def surrogate_grads(model, pb: ProbeBatch, terms, chunk_rows: int = CHUNK_ROWS,
                    head: str = "full"):
    """Flat gradients of ``L = -(1/N) sum_t sel_t A_t pi_theta(y_t) / pi_old(y_t)``, one per
    ``(A, sel)`` of ``terms``, from one forward per chunk; ``N`` counts every response token.

    Source: LOPTI (L4); equals :func:`tailtheory.lopti.probes.bin_gradients` term by term
    (tested). Shapes: terms [(A (B, L), sel (B, L) bool)] -> [(n,)], n parameters.
    """
    params = [q for q in model.parameters() if q.requires_grad]
    n_tok, seq_logp = pb.mask.sum(), _logp_fn(head)
    out = [torch.zeros(sum(q.numel() for q in params), device=params[0].device) for _ in terms]
    for idx, w in _chunks(pb.mask, chunk_rows):
        ids, attn, m, _, p = _rows(pb, idx, w)
        with torch.enable_grad():
            logp = seq_logp(model, ids, attn)                               # (b, w)
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
                  eta: float = ETA, chunk_rows: int = CHUNK_ROWS, head: str = "full"):
    """Figure 1 (c)-(f) and Figure 3 on one batch: ``(norms, delta_pi)``.

    ``norms``: ``{"all": ||grad L_all||, "bins": (4,) ||grad L_b||}``; ``delta_pi``: per-token
    ``Delta pi`` (B, L) after one SGD step with all / the lowest / the highest bin (``all``,
    ``lowest``, ``highest``), after an AR step (``AR``) and after Lopti's two passes (``Lopti``:
    ``pi_old < eta`` first, ``pi_old`` fixed, each pass over all ``N`` tokens). ``model`` is
    not modified. ``head``: a key of :data:`HEADS`. Source: LOPTI (L2, L3, L4, L5).
    """
    bins = prob_bins(pb.pi_old)
    (_, low), (_, high) = lopti_passes(pb.pi_old.log(), pb.mask, eta)
    adv_ar = advantage_reweight(pb.adv.double(), pb.pi_old.log(), alpha).to(pb.adv.dtype)
    terms = [(pb.adv, bins == b) for b in range(N_BINS)] + [(adv_ar, pb.mask), (pb.adv, low)]
    *g_bins, g_ar, g_low = surrogate_grads(model, pb, terms, chunk_rows, head)
    g_all = torch.stack(g_bins).sum(0)
    before = chunked_probs(model, pb, chunk_rows, head)
    after = lambda m: chunked_probs(m, pb, chunk_rows, head) - before  # noqa: E731
    first = stepped(model, g_low, lr)
    g_high, = surrogate_grads(first, pb, [(pb.adv, high)], chunk_rows, head)
    delta = {u: after(stepped(model, g_all if b is None else g_bins[b], lr))
             for u, b in UPDATE_BINS.items()}
    delta["AR"] = after(stepped(model, g_ar, lr))
    delta["Lopti"] = after(stepped(first, g_high, lr))
    return {"all": g_all.norm(), "bins": torch.stack(g_bins).norm(dim=1)}, delta


def _token_logits(model, ids: torch.Tensor, attn: torch.Tensor, t: torch.Tensor, head: str):
    """Logits ``(k, V)`` at positions ``t - 1`` of one row ``ids (1, w)``, differentiable:
    ``full`` slices the row's full logits, ``fused`` applies the head to those k positions only."""
    _logp_fn(head)
    if head == "full":
        return full_forward(model, ids, attn)[0, t - 1].float()
    h = hidden_forward(model, ids, attn)[0, t - 1]                       # (k, H)
    return model.get_output_embeddings()(h).float()


def token_grad_norms(model, pb: ProbeBatch, rows: torch.Tensor, cols: torch.Tensor,
                     head: str = "full"):
    """L1: ``(||grad_theta log pi(y_t)||, ||e_k - softmax(z_{t-1})||)`` of the tokens
    ``(rows[i], cols[i])``; one forward per row, one backward per token (``head``: a key of
    :data:`HEADS`; ``fused`` forms the logits of the k tokens only).

    Source: LOPTI (L1), S4 for the logit-space norm. Shapes: rows, cols (K,) -> ((K,), (K,)).
    """
    params = [q for q in model.parameters() if q.requires_grad]
    param_norm, logit_norm = torch.zeros(len(rows)), torch.zeros(len(rows))
    for r in rows.unique().tolist():
        at = (rows == r).nonzero()[:, 0]                                     # (k,)
        t, w = cols[at], int(cols[at].max()) + 1
        with torch.enable_grad():
            zt = _token_logits(model, pb.input_ids[r:r + 1, :w],
                               pb.attention_mask[r:r + 1, :w], t, head)      # (k, V)
            yt = pb.input_ids[r, t]                                          # (k,)
            lp = torch.log_softmax(zt, -1).gather(-1, yt[:, None])[:, 0]     # (k,)
            for j, i in enumerate(at.tolist()):
                g = torch.autograd.grad(lp[j], params, retain_graph=True, allow_unused=True)
                param_norm[i] = torch.sqrt(sum((gi.double() ** 2).sum() for gi in g
                                               if gi is not None))
        logit_norm[at.cpu()] = score_norm(zt.detach(), yt).float().cpu()
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
    s = torch.zeros(N_BINS, dtype=torch.float64, device=x.device)
    s.index_add_(0, bins[sel], x[sel].double())
    return s.tolist()


def batch_stats(model, pb: ProbeBatch, lr: float = SGD_LR, l1_per_bin: int = L1_PER_BIN,
                generator: torch.Generator | None = None, head: str = "full") -> dict:
    """The stored numbers of one batch: per-bin token counts and sums (never means, so pooling
    batches is exact), gradient norms, and the L1 token sample (``head``: a key of
    :data:`HEADS`)."""
    bins, m, a = prob_bins(pb.pi_old), pb.mask, pb.adv
    pos, neg, ones = m & (a > 0), m & (a < 0), torch.ones_like(pb.pi_old)
    norms, delta = update_probes(model, pb, lr, head=head)
    rows, cols = _sample_tokens(pb, l1_per_bin, generator or torch.Generator().manual_seed(0))
    param_norm, logit_norm = token_grad_norms(model, pb, rows, cols, head)
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
