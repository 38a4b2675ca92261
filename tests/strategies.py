"""Hypothesis strategies shared by the property tests.

Valid objects are built by construction, never by filtering: probabilities are the softmax of
bounded logits, perturbations are drawn inside their bound, masks always keep one element.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

LOGIT_SCALES = (0.1, 1.0, 5.0, 30.0)
"""Logit ranges from nearly uniform to extremely peaked (p down to e^-60)."""


def vocab_sizes(min_v: int = 2, max_v: int = 64) -> st.SearchStrategy[int]:
    """Vocabulary sizes, biased to include the edges and a large one."""
    return st.one_of(st.integers(min_v, max_v), st.sampled_from([min_v, max_v]))


@st.composite
def logits(draw, min_v: int = 2, max_v: int = 64, batch: tuple[int, ...] = (),
           max_scale: float = 30.0) -> torch.Tensor:
    """Float64 logits ``(*batch, V)``: standard normal shapes times a drawn scale, plus a shift."""
    V = draw(vocab_sizes(min_v, max_v))
    scale = draw(st.one_of(st.sampled_from([s for s in LOGIT_SCALES if s <= max_scale]),
                           st.floats(0.0, max_scale)))
    seed = draw(st.integers(0, 2**31 - 1))
    shift = draw(st.floats(-50, 50))
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(*batch, V, generator=g, dtype=torch.float64) * scale + shift
    return z


@st.composite
def probs(draw, min_v: int = 2, max_v: int = 64) -> torch.Tensor:
    """A probability vector: softmax of drawn logits (valid by construction)."""
    return torch.softmax(draw(logits(min_v, max_v)), -1)


@st.composite
def logits_and_token(draw, min_v: int = 2, max_v: int = 64):
    """``(z, k)``: logits and a token index inside the vocabulary."""
    z = draw(logits(min_v, max_v))
    k = draw(st.integers(0, z.shape[-1] - 1))
    return z, k


@st.composite
def bounded_perturbation(draw, V: int, eps: float) -> torch.Tensor:
    """A logit perturbation ``delta`` with ``||delta||_inf <= eps`` (corners included)."""
    kind = draw(st.sampled_from(["uniform", "corners"]))
    arr = draw(arrays(np.float64, V, elements=st.floats(-1.0, 1.0)))
    d = torch.as_tensor(arr)
    if kind == "corners":
        d = torch.sign(d) + (d == 0).double()
    return d * eps
