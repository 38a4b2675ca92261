"""Hypothesis strategies shared by the property tests.

Valid objects are built by construction, never by filtering: probabilities are the softmax of
bounded logits, perturbations are drawn inside their bound, masks always keep one element.
"""

from __future__ import annotations

import math

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


@st.composite
def tabular_policies(draw, max_v: int = 4, max_t: int = 6, max_sequences: int = 5000,
                     allow_eos: bool = True, max_scale: float = 30.0):
    """A ``TabularPolicy`` small enough to enumerate: ``V^T <= max_sequences`` by construction,
    logits from nearly uniform to extremely peaked, optionally an EOS token."""
    from tailtheory.core.tabular import TabularPolicy

    V = draw(st.integers(2, max_v))
    t_cap = max(1, min(max_t, int(np.floor(np.log(max_sequences) / np.log(V)))))
    T = draw(st.integers(1, t_cap))
    eos = draw(st.one_of(st.none(), st.integers(0, V - 1))) if allow_eos else None
    scale = draw(st.sampled_from([s for s in LOGIT_SCALES if s <= max_scale]))
    seed = draw(st.integers(0, 2**31 - 1))
    return TabularPolicy.random(V, T, eos=eos, sharpness=scale, seed=seed)


MISMATCH_EPS = (0.0, 1e-8, 1e-3, 0.05, 0.5, 3.0)
"""Logit-mismatch sizes from float64 rounding to far beyond bf16 (M2, M3)."""


@st.composite
def mismatch_cases(draw, min_v: int = 2, max_v: int = 4096, max_scale: float = 30.0):
    """``(z, delta, k, eps)``: trainer logits, an engine perturbation with ``||delta||_inf <= eps``
    (uniform inside the box, or on its corners), and a token. Built from a seed, so large
    vocabularies cost nothing to draw."""
    z = draw(logits(min_v, max_v, max_scale=max_scale))
    V = z.shape[-1]
    eps = draw(st.one_of(st.sampled_from(MISMATCH_EPS), st.floats(0.0, 3.0)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    u = 2 * torch.rand(V, generator=g, dtype=torch.float64) - 1
    if draw(st.booleans()):
        u = torch.where(u >= 0, 1.0, -1.0).double()  # the corners of the box
    k = draw(st.integers(0, V - 1))
    return z, eps * u, k, eps


@st.composite
def grouped_batches(draw, max_groups: int = 4, max_group: int = 8, max_t: int = 6,
                    min_group: int = 2):
    """``(rewards (B,), group_ids (B,), mask (B, T), W (B, T))``: groups of responses whose masks
    are alive prefixes (at least the first token), rewards in [0, 1] (binary or continuous) and a
    realised energy ``W`` that is a running sum of per-token energies in [0, 2] (OTB)."""
    sizes = draw(st.lists(st.integers(min_group, max_group), min_size=1, max_size=max_groups))
    T = draw(st.integers(1, max_t))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    B = sum(sizes)
    group_ids = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    perm = torch.randperm(B, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    rewards = torch.rand(B, generator=g, dtype=torch.float64)
    if draw(st.booleans()):
        rewards = (rewards < 0.5).double()
    w = 2 * torch.rand(B, T, generator=g, dtype=torch.float64) ** draw(st.sampled_from([1, 4]))
    W = (w * mask).cumsum(-1)
    return rewards[perm], group_ids[perm], mask[perm], W[perm]


@st.composite
def masked_logits(draw, min_v: int = 2, max_v: int = 64, batch: tuple[int, ...] = (3,),
                  max_scale: float = 30.0):
    """``(z, alive)``: logits ``(*batch, V)`` with ``-inf`` (masked tokens) outside ``alive``;
    every row keeps at least one finite entry by construction (a drawn one is forced alive)."""
    z = draw(logits(min_v, max_v, batch=batch, max_scale=max_scale))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    alive = torch.rand(z.shape, generator=g, dtype=torch.float64) >= draw(st.floats(0.0, 0.95))
    keep_one = torch.randint(z.shape[-1], (*batch, 1), generator=g)
    alive.scatter_(-1, keep_one, True)
    return z.masked_fill(~alive, float("-inf")), alive


UNIT = st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1e-12, 1e-8, 1e-4, 1.0]),
                 st.integers(1, 300).map(lambda k: 10.0 ** -k))
"""Where a DVP threshold sits inside its valid range, edges and tiny values included."""


def safe_threshold(rule: str, u: float, z: torch.Tensor) -> float:
    """A threshold of DVP's ``rule`` valid for every row of ``z`` (so ``S`` is never empty), from
    ``u`` in [0, 1]."""
    if rule == "top_p":
        return min(u, 1 - 1e-9)
    if rule == "absolute":  # tau up to the smallest row maximum
        return u * float(torch.log_softmax(z, -1).exp().amax(-1).min())
    return u


P_EDGES = (0.0, 1e-12, 0.0125, 0.025, 0.05, 0.5, 1.0)
"""p-values at the edges and at thresholds of a family of 4 at alpha 0.05 (ties drawn too)."""


def p_value_lists(max_size: int = 12) -> st.SearchStrategy[list[float]]:
    """Non-empty lists of p-values in [0, 1], edges and repeated values included."""
    return st.lists(st.one_of(st.floats(0.0, 1.0), st.sampled_from(P_EDGES)), min_size=1,
                    max_size=max_size)


@st.composite
def ladders(draw, max_sizes: int = 6, max_builds: int = 3, max_seeds: int = 4):
    """``(params, seed_values)`` of a size ladder: 3 to ``max_sizes`` distinct sizes (1e5 to
    1e9 parameters), 1 to ``max_builds`` builds a size, 1 to ``max_seeds`` probe seeds a build;
    values are a line in ``log10`` size plus build noise and probe noise of drawn scales."""
    m = draw(st.integers(3, max_sizes))
    sizes = sorted(draw(st.lists(st.integers(5, 90), min_size=m, max_size=m, unique=True)))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    slope, sd_build, sd_probe = draw(st.floats(-1, 1)), draw(st.floats(0, 1)), draw(st.floats(0, 1))
    params, seed_values = [], []
    for s in sizes:
        for _ in range(draw(st.integers(1, max_builds))):
            n = 10.0 ** (s / 10)
            level = slope * math.log10(n) + sd_build * rng.normal()
            params.append(n)
            seed_values.append(list(level + sd_probe * rng.normal(size=draw(
                st.integers(1, max_seeds)))))
    return params, seed_values
