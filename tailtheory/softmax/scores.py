"""Softmax facts at the logit layer: the score of a sampled token and its (1 - p) wedge.

Source: LOPTI, arXiv 2505.12929, Prop. 4.2 (S1, S4); OTB, arXiv 2602.07078, its logit-gradient
proxy (S2, S3). The same wedge through the network (S5) is in :mod:`tailtheory.softmax.wedge`.

Notation: logits ``z`` of shape ``(..., V)``, ``p = softmax(z)``, sampled token ``k``, one-hot
``e_k``, ``LSE`` the logsumexp; ``u`` the unit roundoff of a floating dtype.

Claims:
    S1  d log p_k / dz = e_k - p                                 :func:`score`
    S2  ||e_k - p||^2 = 1 - 2 p_k + sum_j p_j^2                   :func:`score_sq_norm`
    S3  sum_j p_j^2 = exp(LSE(2z) - 2 LSE(z))                      :func:`sum_p_squared`,
            its errors per dtype :func:`s3_errors` against :func:`lse_budget`
    S4  sqrt(V/(V-1)) (1-p_k) <= ||e_k - p|| <= sqrt(2)(1-p_k) <= sqrt(2(1-p_k))
            :func:`score_norm` (exact), :func:`score_norm_bounds`, :func:`score_norm_bound_weak`,
            their slacks :func:`s4_slacks`, witnesses of both ends :func:`score_norm_witness`,
            one row per token :func:`score_norm_table`

Vocabulary of size 1: the only token has ``p = 1`` and its score is the zero vector; the S4
bounds are then defined as ``(0, 0)`` (the ``V/(V-1)`` factor is never evaluated) and any
``p != 1`` is rejected, since no distribution over one token puts less than all its mass on it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch

from tailtheory.core.checks import (check_logits, check_positive_int, check_tokens,
                                     check_unit_interval)
from tailtheory.core.stats import map_row_blocks

V1_P_ATOL = 1e-12
"""How far ``p`` may be from 1 when the vocabulary has a single token."""


# --- S1, S2: the score and its squared norm ------------------------------------------------

def score(logits: Any, token: Any) -> torch.Tensor:
    """The score of token ``k`` with respect to the logits: ``d log p_k / dz``.

    Source: LOPTI (S1). Formula: ``d log p_k / dz = e_k - softmax(z)``. ``-inf`` logits
    (masked tokens) have ``p = 0``. Computed in blocks of rows (:func:`map_row_blocks`).
    Shapes: logits (..., V), token (...) -> (..., V), float64.
    """
    z = check_logits(logits, dtype=None)
    k = check_tokens(token, z)
    return map_row_blocks(_score_rows, z, k)


def _score_rows(z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    z = z.to(torch.float64)                                            # (r, V)
    return torch.zeros_like(z).scatter_(-1, k[:, None], 1.0) - torch.softmax(z, -1)


def score_norm(logits: Any, token: Any) -> torch.Tensor:
    """The exact norm ``||e_k - p||`` of the score (the quantity S4 bounds).

    Source: LOPTI (S4). Formula: ``||e_k - softmax(z)||_2``.
    Shapes: logits (..., V), token (...) -> (...).
    """
    return torch.linalg.vector_norm(score(logits, token), dim=-1)


def score_sq_norm(logits: Any, token: Any) -> torch.Tensor:
    """The squared score norm in closed form, without forming ``e_k - p``.

    Source: OTB (S2), its logit-gradient proxy. Formula: ``1 - 2 p_k + sum_j p_j^2``.
    ``-inf`` logits are masked tokens: the value equals that of the row without them. Computed
    in blocks of rows; :func:`score_sq_norm_reference` is the one-shot code it equals.
    Shapes: logits (..., V), token (...) -> (...), float64.
    """
    z = check_logits(logits, dtype=None)
    k = check_tokens(token, z)
    return map_row_blocks(_score_sq_norm_rows, z, k)


def _score_sq_norm_rows(z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    z = z.to(torch.float64)                                            # (r, V)
    p_k = torch.log_softmax(z, -1).gather(-1, k[:, None])[:, 0].exp()  # (r,)
    return 1 - 2 * p_k + _sum_p2_rows(z, True)


def score_sq_norm_reference(logits: Any, token: Any) -> torch.Tensor:
    """The unchunked code :func:`score_sq_norm` equals, on the whole ``(..., V)`` at once.

    Source: OTB (S2). Shapes: logits (..., V), token (...) -> (...), float64.
    """
    z = check_logits(logits)
    k = check_tokens(token, z)
    p_k = torch.log_softmax(z, -1).gather(-1, k.unsqueeze(-1)).squeeze(-1).exp()  # (...)
    z = z - z.amax(-1, keepdim=True)
    return 1 - 2 * p_k + torch.exp(torch.logsumexp(2 * z, -1) - 2 * torch.logsumexp(z, -1))


# --- S3: the collision probability from logits ---------------------------------------------

def sum_p_squared(logits: Any, keep_dtype: bool = False, center: bool = True) -> torch.Tensor:
    """``sum_j p_j^2`` from the logits alone, never forming ``p``.

    Source: OTB (S3). Formula: ``exp(LSE(2 z) - 2 LSE(z))`` with ``z`` replaced by
    ``z - max(z)`` (exact in real arithmetic). Centring keeps both LSEs in ``[0, log V]``; without
    it (``center=False``) a common logit offset ``c`` costs about ``3 c u`` in the exponent
    (``u`` the unit roundoff): in bfloat16 a shift of 50 gives errors above 100%.
    With ``keep_dtype`` the arithmetic runs in the input's floating dtype (float32, bfloat16);
    otherwise in float64, converted block by block of rows (:func:`map_row_blocks`, equal to
    :func:`sum_p_squared_reference`). ``-inf`` logits (masked tokens) drop out of both sums.
    Shapes: logits (..., V) -> (...).
    """
    z = check_logits(logits, dtype=None)
    dt = z.dtype if keep_dtype else torch.float64
    return map_row_blocks(lambda zc: _sum_p2_rows(zc.to(dt), center), z)


def _sum_p2_rows(z: torch.Tensor, center: bool) -> torch.Tensor:
    if center:
        z = z - z.amax(-1, keepdim=True)  # (r, V), max entry 0
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


def score_norm_witness_ratio(vocab_size: int, p: float, end: str = "upper") -> float:
    """How close the witness of :func:`score_norm_witness` comes to its end of the S4 wedge.

    Source: LOPTI (S4). ``end="upper"``: ``||e_0 - p|| / (sqrt(2)(1-p))``; ``"lower"``:
    ``sqrt(V/(V-1))(1-p) / ||e_0 - p||``; both are at most 1 and reach it when attained.
    """
    z = score_norm_witness(vocab_size, p, end)
    norm = score_norm(z, 0)
    lower, upper = score_norm_bounds(torch.softmax(z, -1)[0], z.shape[-1])
    return (norm / upper).item() if end == "upper" else (lower / norm).item()


# --- sampling helpers shared by the S1-S5 checks and figures -------------------------------

SCALES = (0.1, 1.0, 5.0, 30.0)
"""Logit standard deviations: from nearly uniform to p down to e^-60."""


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


# --- measurements shared by the S3, S4 checks, their tests and figures ---------------------

LSE_BUDGET_FACTOR = 8.0
"""S3 rounding budget ``8 u (1 + ln V)``: three roundings of numbers in [0, ln V] (two LSEs and
their difference) give about ``u (1 + 4 ln V)`` in the exponent; the factor 2 on top covers the
rounding of ``z - max z``. ``u`` is the unit roundoff of the dtype."""

UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8}


def lse_budget(V: int, dtype: torch.dtype) -> float:
    """The S3 rounding budget on the relative error in ``dtype`` (see LSE_BUDGET_FACTOR).

    Source: OTB (S3). Formula: ``8 u (1 + ln V)``.
    """
    return LSE_BUDGET_FACTOR * UNIT_ROUNDOFF[dtype] * (1 + math.log(V))


def s3_errors(z: torch.Tensor, dtype: torch.dtype) -> dict[str, float]:
    """Relative errors of three routes in ``dtype``, against the extended-precision truth on the
    same (rounded) logits: LSE max-centred, LSE raw, and the plain softmax code.

    Source: OTB (S3). Shapes: z (n, V) -> largest relative error over rows, per route.
    """
    zd = z.to(dtype)
    truth = sum_p_squared_longdouble(zd)
    rel = lambda x: ((x.double() - truth).abs() / truth).max().item()  # noqa: E731
    return {"lse": rel(sum_p_squared(zd, keep_dtype=True)),
            "lse_raw": rel(sum_p_squared(zd, keep_dtype=True, center=False)),
            "softmax": rel(sum_p_squared_reference(zd, keep_dtype=True))}


def s4_slacks(z: torch.Tensor, k: torch.Tensor) -> dict[str, float]:
    """Smallest slacks of the three S4 inequalities over the rows of ``z``.

    Source: LOPTI (S4). ``lower``: ``||e_k - p|| - sqrt(V/(V-1))(1-p_k)``; ``upper``:
    ``sqrt(2)(1-p_k) - ||e_k - p||``; ``weak``: ``sqrt(2(1-p_k)) - sqrt(2)(1-p_k)``; all >= 0
    when S4 holds. Shapes: z (n, V), k (n,) -> three floats.
    """
    V = z.shape[-1]
    norm, p_k = score_norm(z, k), torch.softmax(z, -1).gather(-1, k[:, None]).squeeze(-1)
    lower, upper = score_norm_bounds(p_k, V)
    weak = score_norm_bound_weak(p_k)
    return {"lower": (norm - lower).min().item(), "upper": (upper - norm).min().item(),
            "weak": (weak - upper).min().item()}


def score_norm_table(logits=None, token=None, *, vocab_size: int = 64, n: int = 2000,
                     seed: int = 0) -> pd.DataFrame:
    """One row per token: ``p``, ``1 - p``, ``||e_k - p||`` and the three S4 bounds.

    Source: LOPTI (S4). Without ``logits``, ``n`` rows are drawn (:func:`draw_logits`, half the
    tokens sampled from p, half uniform). Shapes: logits (n, V), token (n,).
    """
    if logits is None:
        g = torch.Generator().manual_seed(seed)
        logits = draw_logits(n, vocab_size, g)
        token = draw_tokens(logits, g)
    if token is None:
        raise ValueError("token is required when logits are given")
    z = check_logits(logits)
    z = z.reshape(-1, z.shape[-1])  # (n, V)
    k = check_tokens(torch.as_tensor(token).reshape(-1), z)
    p = torch.softmax(z, -1).gather(-1, k[:, None]).squeeze(-1)  # (n,)
    lower, upper = score_norm_bounds(p, z.shape[-1])
    return pd.DataFrame({"V": z.shape[-1], "p": p.numpy(), "one_minus_p": (1 - p).numpy(),
                         "score_norm": score_norm(z, k).numpy(), "lower": lower.numpy(),
                         "upper": upper.numpy(), "weak": score_norm_bound_weak(p).numpy()})
