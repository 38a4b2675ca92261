"""Softmax facts: the score of a sampled token and how its norm scales with ``1 - p``.

Paper card
    LOPTI: Yang et al., *Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs*,
    arXiv 2505.12929, Prop. 4.2 (gradient norm of a token scales with ``1 - p``).
    OTB: Li et al., *The Optimal Token Baseline*, arXiv 2602.07078 (the logit-gradient proxy).

Notation: logits ``z`` of shape ``(..., V)``, ``p = softmax(z)``, sampled token ``k``, one-hot
``e_k``, ``LSE`` the logsumexp. Activations ``a`` of one layer at one position, ``H`` wide, with
the Jacobian ``J = dz/da`` of shape ``(V, H)``.

Claims (ids of THEORY.md section 1):
    S1  d log p_k / dz = e_k - p                                 :func:`score`
    S2  ||e_k - p||^2 = 1 - 2 p_k + sum_j p_j^2                   :func:`score_sq_norm`
    S3  sum_j p_j^2 = exp(LSE(2z) - 2 LSE(z))                      :func:`sum_p_squared`
    S4  sqrt(V/(V-1)) (1-p_k) <= ||e_k - p|| <= sqrt(2)(1-p_k) <= sqrt(2(1-p_k))
            :func:`score_norm` (exact), :func:`score_norm_bounds`, :func:`score_norm_bound_weak`,
            witnesses of both ends :func:`score_norm_witness`
    S5  sigma_min(J) sqrt(V/(V-1)) (1-p_k) <= ||grad_a log p_k|| <= ||J||_2 sqrt(2) (1-p_k)
            :func:`activation_wedge` (exact Jacobians), :func:`wedge_summary`,
            :func:`tiny_lm_wedge` (the S5 setting)

Vocabulary of size 1: the only token has ``p = 1`` and its score is the zero vector; the S4
bounds are then defined as ``(0, 0)`` (the ``V/(V-1)`` factor is never evaluated) and any
``p != 1`` is rejected, since no distribution over one token puts less than all its mass on it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from tailtheory.core.checks import (check_logits, check_positive_int, check_tokens, check_unit_interval)

V1_P_ATOL = 1e-12
"""How far ``p`` may be from 1 when the vocabulary has a single token."""

WEDGE_RTOL = 1e-6
"""Relative slack of the S5 wedge test: Qwen2/Llama RMSNorm casts to float32 internally, so even
a float64 model's gradients agree with ``J^T (e_k - p)`` only to ~1e-8 relative."""


# --- S1, S2: the score and its squared norm ------------------------------------------------

def score(logits: Any, token: Any) -> torch.Tensor:
    """The score of token ``k`` with respect to the logits: ``d log p_k / dz``.

    Source: LOPTI (S1). Formula: ``d log p_k / dz = e_k - softmax(z)``.
    Shapes: logits (..., V), token (...) -> (..., V), float64.
    """
    z = check_logits(logits)
    k = check_tokens(token, z)
    e_k = torch.nn.functional.one_hot(k, z.shape[-1]).to(z.dtype)  # (..., V)
    return e_k - torch.softmax(z, -1)


def score_norm(logits: Any, token: Any) -> torch.Tensor:
    """The exact norm ``||e_k - p||`` of the score (the quantity S4 bounds).

    Source: LOPTI (S4). Formula: ``||e_k - softmax(z)||_2``.
    Shapes: logits (..., V), token (...) -> (...).
    """
    return torch.linalg.vector_norm(score(logits, token), dim=-1)


def score_sq_norm(logits: Any, token: Any) -> torch.Tensor:
    """The squared score norm in closed form, without forming ``e_k - p``.

    Source: OTB (S2), its logit-gradient proxy. Formula: ``1 - 2 p_k + sum_j p_j^2``.
    Shapes: logits (..., V), token (...) -> (...), float64.
    """
    z = check_logits(logits)
    k = check_tokens(token, z)
    p_k = torch.log_softmax(z, -1).gather(-1, k.unsqueeze(-1)).squeeze(-1).exp()  # (...)
    return 1 - 2 * p_k + sum_p_squared(z)


# --- S3: the collision probability from logits ---------------------------------------------

def sum_p_squared(logits: Any, keep_dtype: bool = False, center: bool = True) -> torch.Tensor:
    """``sum_j p_j^2`` from the logits alone, never forming ``p``.

    Source: OTB (S3). Formula: ``exp(LSE(2 z) - 2 LSE(z))`` with ``z`` replaced by
    ``z - max(z)`` (exact in real arithmetic). Centring keeps both LSEs in ``[0, log V]``; without
    it (``center=False``) a common logit offset ``c`` costs about ``3 c u`` in the exponent
    (``u`` the unit roundoff): in bfloat16 a shift of 50 gives errors above 100%.
    With ``keep_dtype`` the arithmetic runs in the input's floating dtype (float32, bfloat16);
    otherwise in float64. Shapes: logits (..., V) -> (...).
    """
    z = check_logits(logits, dtype=None if keep_dtype else torch.float64)
    if center:
        z = z - z.amax(-1, keepdim=True)  # (..., V), max entry 0
    return torch.exp(torch.logsumexp(2 * z, -1) - 2 * torch.logsumexp(z, -1))


def sum_p_squared_reference(logits: Any, keep_dtype: bool = False) -> torch.Tensor:
    """The obvious code S3 must equal: ``softmax(z).pow(2).sum(-1)``.

    Source: OTB (S3). Shapes: logits (..., V) -> (...).
    """
    z = check_logits(logits, dtype=None if keep_dtype else torch.float64)
    return torch.softmax(z, -1).pow(2).sum(-1)


def sum_p_squared_longdouble(logits: Any) -> torch.Tensor:
    """``sum_j p_j^2`` in numpy's extended precision: the truth S3's routes are measured against.

    Source: OTB (S3). On x86-64 ``np.longdouble`` is the 80-bit format (unit roundoff ~5e-20),
    far below float64's, so both float64 routes can be graded; elsewhere it may equal float64.
    Shapes: logits (..., V) -> (...), returned as float64.
    """
    z = check_logits(logits, dtype=None).detach().to(torch.float64).numpy().astype(np.longdouble)
    z = z - z.max(-1, keepdims=True)  # (..., V)
    e = np.exp(z)
    return torch.as_tensor((np.exp(2 * z).sum(-1) / e.sum(-1) ** 2).astype(np.float64))


# --- S4: the (1 - p) wedge at the logit layer ----------------------------------------------

def _check_p_for_vocab(p: Any, vocab_size: Any) -> tuple[torch.Tensor, int]:
    V = check_positive_int(vocab_size, "vocab_size")
    p_k = check_unit_interval(p, "p")
    if V == 1 and p_k.numel() and (p_k - 1).abs().max() > V1_P_ATOL:
        raise ValueError(f"p must be 1 when vocab_size is 1 (the only token has all the mass); "
                         f"got min p = {p_k.min().item():.6g}")
    return p_k, V


def score_norm_bounds(p: Any, vocab_size: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower and upper bound on ``||e_k - p||`` from ``p_k`` and ``V`` alone.

    Source: LOPTI, Prop. 4.2 at the logit layer (S4).
    Formula: ``sqrt(V/(V-1)) (1 - p_k) <= ||e_k - p|| <= sqrt(2) (1 - p_k)``; the upper end is
    attained with all remaining mass on one other token, the lower with it spread evenly.
    ``vocab_size = 1`` needs ``p = 1`` and gives ``(0, 0)``: the score is then exactly zero.
    Shapes: p (...) -> ((...), (...)).
    """
    p_k, V = _check_p_for_vocab(p, vocab_size)
    if V == 1:
        return torch.zeros_like(p_k), torch.zeros_like(p_k)
    lower = math.sqrt(V / (V - 1)) * (1 - p_k)
    upper = math.sqrt(2.0) * (1 - p_k)
    return lower, upper


def score_norm_bound_weak(p: Any) -> torch.Tensor:
    """The weaker upper bound ``||e_k - p|| <= sqrt(2 (1 - p_k))``, looser than S4's upper end.

    Source: LOPTI (S4). Formula: ``sqrt(2 (1 - p_k))`` (``>= sqrt(2)(1 - p_k)`` as ``1 - p <= 1``).
    Shapes: p (...) -> (...).
    """
    p_k = check_unit_interval(p, "p")
    return torch.sqrt(2 * (1 - p_k))


# --- S5: the wedge through the network -----------------------------------------------------

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
        lower, upper = score_norm_bounds(rows["p"][sel], vocab_size)
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


WITNESS_GAP = 60.0
"""Logit gap that parks the rest of the mass of an upper-end witness (e^-60 ~ 1e-26)."""


def score_norm_witness(vocab_size: int, p: float, end: str = "upper") -> torch.Tensor:
    """Logits (token 0 has probability ``p``) at which an end of the S4 wedge is attained.

    Source: LOPTI (S4). ``end="upper"``: the remaining mass on token 1 (``||e_0 - p||`` =
    ``sqrt(2)(1-p)`` up to e^-60); ``"lower"``: spread evenly over tokens 1..V-1 (equality).
    Shapes: -> (V,), float64; ``0 < p < 1``, ``V >= 2``.
    """
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    if end not in ("upper", "lower"):
        raise ValueError(f"end must be 'upper' or 'lower', got {end!r}")
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1) for a finite witness, got {p!r}")
    rest = math.log1p(-p)
    z = torch.full((V,), rest - (math.log(V - 1) if end == "lower" else WITNESS_GAP),
                   dtype=torch.float64)
    if end == "upper":
        z[1] = rest
    z[0] = math.log(p)
    return z


# --- sampling helpers shared by the S1-S5 checks and figures -------------------------------

SCALES = (0.1, 1.0, 5.0, 30.0)
"""Logit standard deviations: from nearly uniform to p down to e^-60."""

S5_SHARPEN = 32.0
"""The random-init LM's output head is multiplied by this so sampled tokens span p ~ 0 to ~1
(a random head gives p ~ 1/V for every token, leaving no range in 1 - p)."""


def draw_logits(n: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` rows of float64 logits, each with a scale from SCALES and an offset in [-50, 50].

    Shapes: -> (n, V).
    """
    n, V = check_positive_int(n, "n"), check_positive_int(vocab_size, "vocab_size")
    pick = torch.randint(len(SCALES), (n, 1), generator=generator)
    scale = torch.tensor(SCALES, dtype=torch.float64)[pick]  # (n, 1)
    shift = (torch.rand(n, 1, generator=generator, dtype=torch.float64) - 0.5) * 100
    return torch.randn(n, V, generator=generator, dtype=torch.float64) * scale + shift


def draw_tokens(logits: Any, generator: torch.Generator) -> torch.Tensor:
    """Even rows: a token sampled from p (head tokens); odd rows: a uniform one (tail tokens).

    Shapes: logits (n, V) -> (n,).
    """
    z = check_logits(logits)
    n, V = z.shape
    sampled = torch.multinomial(torch.softmax(z, -1), 1, generator=generator).squeeze(-1)
    uniform = torch.randint(V, (n,), generator=generator)
    return torch.where(torch.arange(n) % 2 == 0, sampled, uniform)


def tiny_lm_wedge(vocab_size: int = 64, hidden: int = 128, T: int = 10, n_tokens: int = 4,
                  sharpen: float = S5_SHARPEN, seed: int = 0):
    """S5 rows of a random-init 2-layer tiny Qwen2 LM in float64, output head times ``sharpen``.

    Source: LOPTI (S5). Returns ``(rows, layer_names)`` as :func:`activation_wedge` and
    :func:`layer_modules`; deterministic in ``seed``.
    """
    from tailtheory.core.models import tiny_lm

    model = tiny_lm(vocab_size=vocab_size, hidden=hidden, layers=2, seed=seed).double()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab_size, (T,), generator=g)
    names = [name for name, _ in layer_modules(model)]
    return activation_wedge(model, ids, n_tokens, g), names
