"""Softmax facts through the network: LOPTI's (1 - p) wedge for the activations of every layer.

Source: LOPTI, Yang et al., arXiv 2505.12929, Prop. 4.2 through the network (S5). The same
wedge at the logit layer (S4) is :func:`tailtheory.softmax.scores.score_norm_bounds`.

Notation: activations ``a`` of one layer at one position, ``H`` wide, with the Jacobian
``J = dz/da`` of shape ``(V, H)``; ``p = softmax(z)``, sampled token ``k``; ``L_act`` the layers
looked at (embedding, each block, the final norm).

Claims:
    S5  sigma_min(J) sqrt(V/(V-1)) (1-p_k) <= ||grad_a log p_k|| <= ||J||_2 sqrt(2) (1-p_k)
            :func:`activation_wedge` (exact Jacobians), :func:`wedge_summary` (fraction inside,
            fitted constants), :func:`tiny_lm_wedge` (the S5 setting), one row per token
            :func:`layer_wedge_table`
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.models import tiny_lm
from tailtheory.softmax import scores as sm

WEDGE_RTOL = 1e-6
"""Relative slack of the S5 wedge test: Qwen2/Llama RMSNorm casts to float32 internally, so even
a float64 model's gradients agree with ``J^T (e_k - p)`` only to ~1e-8 relative."""


S5_SHARPEN = 32.0
"""The random-init LM's output head is multiplied by this so sampled tokens span p ~ 0 to ~1
(a random head gives p ~ 1/V for every token, leaving no range in 1 - p)."""


def layer_modules(model) -> list[tuple[str, torch.nn.Module]]:
    """The activations S5 looks at: embedding output, each block's output, the final norm.

    Works for Hugging Face Qwen2- and Llama-style causal LMs (``model.model.layers``).
    """
    body = getattr(model, "model", None)
    if body is None or not all(hasattr(body, a) for a in ("embed_tokens", "layers", "norm")):
        raise ValueError("model must be a Qwen2/Llama-style causal LM with model.embed_tokens, "
                         "model.layers and model.norm")
    mods = [("embed", body.embed_tokens)]
    mods += [(f"block{i + 1}", layer) for i, layer in enumerate(body.layers)]
    return mods + [("final_norm", body.norm)]


def _leaf_grad(model, ids: torch.Tensor, module, t: torch.Tensor, pick) -> torch.Tensor:
    """Gradients with respect to the layer's activation ``a_t``, one sequence copy per output.

    Copy ``n`` differentiates ``pick(logits)[n]`` (a function of position ``t[n]`` only) with
    respect to its own ``a_{t[n]}``: copies do not interact, so one plain backward pass yields
    every diagonal block ``d z_t / d a_t`` without the causal cross terms ``d z_t / d a_s``.
    Shapes: ids (1, T), t (N,) -> (N, H).
    """
    box: dict[str, torch.Tensor] = {}

    def swap(mod, inp, out):
        box["leaf"] = out.detach().requires_grad_(True)  # (N, T, H): activations made a leaf
        return box["leaf"]

    handle = module.register_forward_hook(swap)
    try:
        z = model(input_ids=ids.expand(t.shape[0], -1)).logits  # (N, T, V)
    finally:
        handle.remove()
    grad = torch.autograd.grad(pick(z).sum(), box["leaf"])[0]  # parameters' .grad untouched
    return grad[torch.arange(t.shape[0]), t]  # (N, H)


def _layer_rows(model, ids: torch.Tensor, module, p: torch.Tensor,
                k: torch.Tensor) -> dict[str, torch.Tensor]:
    """One layer: the Jacobian of every position and the gradients of the sampled tokens.

    Shapes: ids (1, T), p (T, V), k (T, m) -> dict of (T, m) tensors.
    """
    (T, V), m = p.shape, k.shape[1]
    tJ, v = torch.arange(T).repeat_interleave(V), torch.arange(V).repeat(T)  # (T*V,)
    J = _leaf_grad(model, ids, module, tJ, lambda z: z[torch.arange(T * V), tJ, v])
    J = J.reshape(T, V, -1)  # (T, V, H)
    tg = torch.arange(T).repeat_interleave(m)  # (T*m,)
    g = _leaf_grad(model, ids, module, tg, lambda z: torch.log_softmax(
        z[torch.arange(T * m), tg], -1).gather(-1, k.reshape(-1, 1)))
    g = g.reshape(T, m, -1)  # (T, m, H)
    s = torch.linalg.svdvals(J)  # (T, min(V, H))
    smin = s[:, -1] if V <= J.shape[-1] else s.new_zeros(T)  # full row rank needs V <= H
    onehot = torch.nn.functional.one_hot(k, V).to(p.dtype)  # (T, m, V)
    chain = (onehot - p[:, None]) @ J  # (T, m, H): S1 chained through J, J^T (e_k - p)
    return {"t": tg.reshape(T, m), "k": k, "p": p.gather(-1, k),
            "grad_norm": torch.linalg.vector_norm(g, dim=-1),
            "J_norm": s[:, :1].expand(T, m), "J_smin": smin[:, None].expand(T, m),
            "chain_err": torch.linalg.vector_norm(g - chain, dim=-1) / s[:, :1]}


def activation_wedge(model, input_ids: Any, n_tokens: int = 4,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Per-token activation-gradient norms of every layer, with that position's Jacobian.

    Source: LOPTI, Prop. 4.2 through the network (S5).
    Formula: ``grad_a log p_k = J^T (e_k - p)`` with ``J = dz_t / da_t`` (exact, by autograd),
    hence ``sigma_min(J) sqrt(V/(V-1))(1-p_k) <= ||grad|| <= ||J||_2 sqrt(2)(1-p_k)``; the lower
    end needs full row rank (``V <= H``), otherwise ``J_smin`` is reported as 0.
    ``n_tokens`` tokens ``k ~ p_t`` are sampled at each position. Runs in the model's dtype.
    Shapes: input_ids (T,) or (1, T) -> dict of (L_act * T * n_tokens,) tensors, keys ``layer``
    (index into :func:`layer_modules`), ``t``, ``k``, ``p``, ``grad_norm``, ``J_norm``,
    ``J_smin``, ``chain_err`` (``||grad - J^T(e_k - p)|| / ||J||``).
    """
    ids = torch.as_tensor(input_ids)
    if ids.is_floating_point() or ids.numel() == 0 or (ids.ndim == 2 and ids.shape[0] != 1):
        raise ValueError(f"input_ids must be a non-empty integer sequence (T,) or (1, T); got "
                         f"shape {tuple(ids.shape)}, dtype {ids.dtype}")
    ids = ids.long().reshape(1, -1)  # (1, T)
    n_tokens = check_positive_int(n_tokens, "n_tokens")
    with torch.no_grad():
        p = torch.softmax(model(input_ids=ids).logits[0], -1)  # (T, V)
    k = torch.multinomial(p.float(), n_tokens, replacement=True, generator=generator)  # (T, m)
    rows: dict[str, list[torch.Tensor]] = {}
    for li, (_, module) in enumerate(layer_modules(model)):
        r = _layer_rows(model, ids, module, p, k)
        r["layer"] = torch.full_like(r["k"], li)
        for name, v in r.items():
            rows.setdefault(name, []).append(v.detach().reshape(-1))
    return {name: torch.cat(v) for name, v in rows.items()}


def wedge_summary(rows: dict[str, torch.Tensor], vocab_size: int,
                  rtol: float = WEDGE_RTOL) -> list[dict[str, float]]:
    """Per layer: the fraction of tokens inside their own Jacobian wedge and fitted constants.

    Source: LOPTI (S5). ``c_lo``/``c_hi`` are the smallest/largest ``||grad|| / (1 - p_k)``;
    ``upper_ratio_max`` = max ``||grad|| / (||J|| sqrt(2)(1-p))`` (<= 1),
    ``lower_ratio_min`` = min ``||grad|| / (sigma_min sqrt(V/(V-1))(1-p))`` (>= 1; inf when J
    is rank deficient). ``rtol`` absorbs rounding. Shapes: rows as from :func:`activation_wedge`.
    """
    out = []
    for li in torch.unique(rows["layer"]).tolist():
        sel = rows["layer"] == li
        g, q = rows["grad_norm"][sel], 1 - rows["p"][sel]
        lower, upper = sm.score_norm_bounds(rows["p"][sel], vocab_size)
        upper, lower = rows["J_norm"][sel] * upper, rows["J_smin"][sel] * lower
        inside = (g <= upper * (1 + rtol)) & (g >= lower * (1 - rtol))
        g, q, upper, lower = (x[q > 0] for x in (g, q, upper, lower))  # p = 1: 0/0 ratios
        out.append({
            "layer": int(li), "n": int(sel.sum()), "frac_inside": inside.double().mean().item(),
            "c_lo": (g / q).min().item(), "c_hi": (g / q).max().item(),
            "upper_ratio_max": (g / upper).max().item(),
            "lower_ratio_min": (g / lower).min().item() if bool((lower > 0).all()) else math.inf,
            "J_norm_median": rows["J_norm"][sel].median().item(),
            "J_smin_median": rows["J_smin"][sel].median().item(),
            "chain_err_max": rows["chain_err"][sel].max().item(),
            "one_minus_p_min": q.min().item(), "one_minus_p_max": q.max().item(),
        })
    return out


def tiny_lm_wedge(vocab_size: int = 64, hidden: int = 128, T: int = 10, n_tokens: int = 4,
                  sharpen: float = S5_SHARPEN, seed: int = 0):
    """S5 rows of a random-init 2-layer tiny Qwen2 LM in float64, output head times ``sharpen``.

    Source: LOPTI (S5). Returns ``(rows, layer_names)`` as :func:`activation_wedge` and
    :func:`layer_modules`; deterministic in ``seed``.
    """
    model = tiny_lm(vocab_size=vocab_size, hidden=hidden, layers=2, seed=seed).double()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab_size, (T,), generator=g)
    names = [name for name, _ in layer_modules(model)]
    return activation_wedge(model, ids, n_tokens, g), names


def layer_wedge_table(rows=None, names=None, *, vocab_size: int = 64, hidden: int = 128,
                      T: int = 10, n_tokens: int = 4, seed: int = 0) -> pd.DataFrame:
    """One row per (layer, token): ``||grad_a log p_k||``, ``1 - p`` and its own Jacobian wedge.

    Source: LOPTI (S5). ``rows``/``names`` as from :func:`tiny_lm_wedge` (built with the other
    arguments when omitted). ``vocab_size`` must be the model's vocabulary.
    """
    if rows is None:
        rows, names = tiny_lm_wedge(vocab_size, hidden, T, n_tokens, seed=seed)
    lower, upper = sm.score_norm_bounds(rows["p"], vocab_size)
    idx = rows["layer"].numpy()
    return pd.DataFrame({
        "layer": [names[i] if names else str(i) for i in idx], "t": rows["t"].numpy(),
        "k": rows["k"].numpy(), "p": rows["p"].numpy(), "one_minus_p": (1 - rows["p"]).numpy(),
        "grad_norm": rows["grad_norm"].numpy(), "J_norm": rows["J_norm"].numpy(),
        "J_smin": rows["J_smin"].numpy(), "upper": (rows["J_norm"] * upper).numpy(),
        "lower": (rows["J_smin"] * lower).numpy()})
