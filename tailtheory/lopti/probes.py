"""Probes of how one policy-gradient step treats tokens by probability (LOPTI, claims L4, L5).

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1 (c)-(f) and Figure 3.

Tokens of a batch are binned by ``pi_old`` (the probability of the sampled token under the policy
that generated it) into the fixed intervals ``[0, .25], (.25, .5], (.5, .75], (.75, 1]``. The
objective is the GRPO surrogate with ratio ``r = pi_theta / pi_old`` and the denominator over
**all** response tokens, also when only one bin's advantages are kept:

    L_b(theta) = -(1/N) sum_{t in mask} 1[bin(t) in b] * A_t * r_t(theta),   N = |mask|

Probes: (d) ``||grad L_b||`` per bin (:func:`bin_grad_norms`); (c), (e), (f) the per-bin mean of
``Delta pi = pi_theta'(y_t) - pi_theta(y_t)`` after one SGD step ``theta' = theta - lr grad L_b``
with ``b`` = all / lowest / highest bin (:func:`prob_change_by_bin`); Figure 3: the fraction of
``A > 0`` tokens whose probability rose, per bin (:func:`rise_fraction`), after a plain step, an
Advantage-Reweighted one (pass the reweighted ``A``) or Lopti's two passes
(:func:`sequential_prob_change`).

Per-token tensors are aligned with ``input_ids (B, L)``: token ``t`` is scored by the logits at
``t - 1``, so ``mask[:, 0]`` must be False. ``model`` is never modified (steps act on a copy).

Claims: L4, L5.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from tailtheory.core.checks import as_tensor, check_finite, check_mask, check_unit_interval
from tailtheory.core.forward import position_ids
from tailtheory.core.forward import hidden_forward, lm_head
from tailtheory.core.fused import fused_token_stats
from tailtheory.core.stats import token_stats

BIN_EDGES = (0.25, 0.5, 0.75)
"""Upper edges of the first three bins: ``[0,.25], (.25,.5], (.5,.75], (.75,1]`` (LOPTI Fig. 1)."""
N_BINS = len(BIN_EDGES) + 1

LOPTI_FIG1A = (0.192, 0.102, 0.101, 0.605)
"""LOPTI (arXiv 2505.12929) Fig. 1(a), Qwen2.5-7B on K&K: sampled response tokens per ``pi_old``
bin ``[0, .25], (.25, .5], (.5, .75], (.75, 1]`` (19.2%, 10.2%, 10.1%, 60.5%)."""

UPDATES = {"all": (0, 1, 2, 3), "lowest": (0,), "highest": (3,)}
"""Which bins keep their advantages in the SGD step: Figure 1 (c), (e), (f)."""


def prob_bins(pi_old: Any) -> torch.Tensor:
    """Bin index 0..3 of each probability; right-closed bins, 0 falls into bin 0.

    Source: LOPTI (L4). Shapes: pi_old (...) -> (...) long.
    """
    p = check_unit_interval(pi_old, "pi_old")
    return torch.bucketize(p, torch.tensor(BIN_EDGES, dtype=p.dtype, device=p.device), right=False)


def sequence_logp(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
    """``log pi(x_t | x_<t)`` for t >= 1 (0 at t = 0), one full forward; differentiable.

    Shapes: input_ids (B, L) -> (B, L).
    """
    attn = (torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None
            else attention_mask)
    z = model(input_ids=input_ids, attention_mask=attn.long(), position_ids=position_ids(attn),
              use_cache=False).logits                                  # (B, L, V)
    lp = token_stats(z[:, :-1], input_ids[:, 1:])["logp"]               # (B, L-1)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)


def fused_sequence_logp(model, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor | None = None):
    """:func:`sequence_logp` without the ``(B, L, V)`` logits: the last hidden states through the
    fused LM head (``tailtheory.core.fused.fused_token_stats``, whose backward recomputes its
    tiles). Differentiable in every parameter; equal to :func:`sequence_logp` to float32
    rounding (tested). Refuses a model whose logits are not ``h W^T + b``.

    Shapes: input_ids (B, L) -> (B, L).
    """

    attn = (torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None
            else attention_mask)
    W, b = lm_head(model)
    h = hidden_forward(model, input_ids, attn)                         # (B, L, H)
    lp = fused_token_stats(h[:, :-1], W, input_ids[:, 1:], b)["logp"]   # (B, L-1)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)


def _check_batch(model, input_ids, mask, adv, pi_old, attention_mask):
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(input_ids)
    if ids.is_floating_point() or ids.ndim != 2 or ids.shape[1] < 2:
        raise ValueError(f"input_ids must be integer ids of shape (B, L) with L >= 2; got "
                         f"{ids.dtype} {tuple(ids.shape)}")
    V = model.config.vocab_size
    if ids.min() < 0 or ids.max() >= V:
        raise ValueError(f"input_ids must lie in [0, {V}) (the model's vocabulary); got range "
                         f"[{int(ids.min())}, {int(ids.max())}]")
    m = check_mask(mask, ids, "mask")
    if m[:, 0].any():
        raise ValueError("mask must be False at position 0 (the first token has no logits)")
    a = check_finite(as_tensor(adv, "adv", torch.float32), "adv")
    p = check_unit_interval(as_tensor(pi_old, "pi_old", torch.float64), "pi_old")
    for t, name in ((a, "adv"), (p, "pi_old")):
        if t.shape != ids.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(ids.shape)}")
    if (p[m] <= 0).any():
        raise ValueError("pi_old must be > 0 on every masked token (it divides the ratio)")
    attn = None if attention_mask is None else check_mask(attention_mask, ids, "attention_mask")
    return ids.long(), m, a, p, attn


def _surrogate(logp, pi_old, adv, mask, sel) -> torch.Tensor:
    """``L_b``: the GRPO surrogate with only the ``sel`` tokens advantaged, over all N tokens."""
    ratio = torch.exp(logp - pi_old.log().to(logp.dtype))
    return -(ratio * adv * (mask & sel)).sum() / mask.sum()


def bin_gradients(model, input_ids, mask, adv, pi_old, attention_mask=None):
    """Flat parameter gradients of ``L_all`` and of each ``L_b`` (one bin kept), same forward.

    Source: LOPTI (L4 (d)). ``grad L_all = sum_b grad L_b`` (linearity; tested).
    Shapes: input_ids, mask, adv, pi_old (B, L) -> (g_all (n,), g_bins (4, n)), n parameters.
    """
    ids, m, a, p, attn = _check_batch(model, input_ids, mask, adv, pi_old, attention_mask)
    params = [q for q in model.parameters() if q.requires_grad]
    with torch.enable_grad():
        logp = sequence_logp(model, ids, attn)
        bins = prob_bins(p)
        flat = []
        for keep_bins in (UPDATES["all"], *((b,) for b in range(N_BINS))):
            sel = torch.isin(bins, torch.tensor(keep_bins, device=bins.device))
            g = torch.autograd.grad(_surrogate(logp, p, a, m, sel), params,
                                    retain_graph=True, allow_unused=True)
            flat.append(torch.cat([(gi if gi is not None else torch.zeros_like(q)).reshape(-1)
                                   for gi, q in zip(g, params)]))
    return flat[0], torch.stack(flat[1:])


def bin_grad_norms(model, input_ids, mask, adv, pi_old, attention_mask=None):
    """``(||grad L_all||, ||grad L_b|| for b = 0..3)``: LOPTI Figure 1 (d).

    Source: LOPTI (L4): decreasing in b (paper ~0.71, 0.36, 0.23, 0.15 vs 0.82 for all).
    Shapes: (B, L) inputs -> (norm_all (), norm_bins (4,)).
    """
    g_all, g_bins = bin_gradients(model, input_ids, mask, adv, pi_old, attention_mask)
    return g_all.norm(), g_bins.norm(dim=1)


def _check_lr(lr: Any) -> float:
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and 0 <= lr < float("inf")):
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    return float(lr)


def _sgd_passes(model, ids, m, a, p, attn, lr: float, selections) -> torch.Tensor:
    """SGD steps on a copy of ``model``, one per selection, ``pi_old`` fixed; returns Delta pi."""
    step = copy.deepcopy(model)
    params = [q for q in step.parameters() if q.requires_grad]
    with torch.no_grad():
        before = sequence_logp(step, ids, attn).exp()
    for sel in selections:
        with torch.enable_grad():
            loss = _surrogate(sequence_logp(step, ids, attn), p, a, m, sel)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        with torch.no_grad():
            for q, g in zip(params, grads):
                if g is not None:
                    q.sub_(lr * g)
    with torch.no_grad():
        after = sequence_logp(step, ids, attn).exp()
    return (after - before) * m


def sgd_prob_change(model, input_ids, mask, adv, pi_old, lr: float,
                    update: str = "all", attention_mask=None) -> torch.Tensor:
    """``Delta pi_t`` of every token after one SGD step on ``L_b`` (b from ``UPDATES[update]``).

    Source: LOPTI (L4 (c), (e), (f)). ``theta' = theta - lr grad L_b`` on a copy of ``model``;
    ``Delta pi_t = pi_theta'(y_t) - pi_theta(y_t)``, 0 outside ``mask``.
    Shapes: (B, L) inputs -> (B, L).
    """
    if update not in UPDATES:
        raise ValueError(f"update must be one of {tuple(UPDATES)}, got {update!r}")
    lr = _check_lr(lr)
    ids, m, a, p, attn = _check_batch(model, input_ids, mask, adv, pi_old, attention_mask)
    sel = torch.isin(prob_bins(p), torch.tensor(UPDATES[update], device=m.device))
    return _sgd_passes(model, ids, m, a, p, attn, lr, [sel])


def sequential_prob_change(model, input_ids, mask, adv, pi_old, lr: float, selections,
                           attention_mask=None) -> torch.Tensor:
    """``Delta pi_t`` after one SGD step per selection, in order, on the same batch (Lopti, L3/L5).

    Source: LOPTI (L3, L5). Step ``i`` keeps only the advantages inside ``selections[i]`` (bool
    ``(B, L)``), divides by all ``N`` response tokens, and keeps ``pi_old`` fixed (not recomputed
    between the passes). Lopti with ``eta``: ``[pi_old < eta, pi_old >= eta]``; reversed order:
    the list reversed. ``[mask]`` is one plain step. Shapes: (B, L) inputs -> (B, L).
    """
    lr = _check_lr(lr)
    ids, m, a, p, attn = _check_batch(model, input_ids, mask, adv, pi_old, attention_mask)
    if isinstance(selections, torch.Tensor) or not selections:
        raise ValueError("selections must be a non-empty list of bool (B, L) masks")
    sels = [check_mask(s, ids, f"selections[{i}]", allow_empty=True)
            for i, s in enumerate(selections)]
    return _sgd_passes(model, ids, m, a, p, attn, lr, sels)


def bin_means(values: Any, pi_old: Any, mask: Any) -> torch.Tensor:
    """Mean of ``values`` over the masked tokens of each ``pi_old`` bin (NaN for an empty bin).

    Shapes: values, pi_old, mask (B, L) -> (4,).
    """
    v = as_tensor(values, "values")
    m = check_mask(mask, v, "mask", allow_empty=True)
    bins = prob_bins(pi_old)
    if bins.shape != v.shape:
        raise ValueError(f"pi_old has shape {tuple(bins.shape)}, expected {tuple(v.shape)}")
    return torch.stack([v[m & (bins == b)].mean() if (m & (bins == b)).any()
                        else torch.tensor(float("nan"), dtype=v.dtype) for b in range(N_BINS)])


def prob_change_by_bin(model, input_ids, mask, adv, pi_old, lr: float, update: str = "all",
                       attention_mask=None) -> torch.Tensor:
    """Per-bin mean ``Delta pi`` after one SGD step: LOPTI Figure 1 (c) / (e) / (f).

    Source: LOPTI (L4). Shapes: (B, L) inputs -> (4,).
    """
    dp = sgd_prob_change(model, input_ids, mask, adv, pi_old, lr, update, attention_mask)
    return bin_means(dp, pi_old, mask)


def rise_fraction(delta_pi: Any, adv: Any, pi_old: Any, mask: Any) -> torch.Tensor:
    """Among masked tokens with ``A > 0``, the fraction whose probability rose, per bin.

    Source: LOPTI (L5, Figure 3). NaN for a bin with no such token.
    Shapes: delta_pi, adv, pi_old, mask (B, L) -> (4,).
    """
    dp = check_finite(as_tensor(delta_pi, "delta_pi"), "delta_pi")
    a = check_finite(as_tensor(adv, "adv"), "adv")
    if a.shape != dp.shape:
        raise ValueError(f"adv has shape {tuple(a.shape)}, expected {tuple(dp.shape)}")
    m = check_mask(mask, dp, "mask", allow_empty=True) & (a > 0)
    return bin_means((dp > 0).double(), pi_old, m)
