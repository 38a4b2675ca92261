"""Tabular autoregressive policies, enumerated exactly.

A tabular policy over a vocabulary of ``V`` tokens and a horizon of ``T`` steps keeps one logit
vector per prefix (context). Every distinct sequence is enumerated once, so expectations such as
``J(pi) = E_{y~pi}[R(y)]`` are exact sums, not Monte Carlo estimates. This is the ground truth the
trust-region bounds of TRM (T1-T13), the pruning bounds of DVP (P2) and the baseline of OTB (O1)
are checked against.

Tree convention. Without an end-of-sequence token every sequence has length ``T`` and the contexts
are all prefixes of length ``0..T-1``: ``P = sum_t V^t`` contexts, ``N = V^T`` sequences. With
``eos`` a sequence stops after generating it; contexts are the prefixes of non-EOS tokens of
length ``0..T-1`` (``P = sum_{t<T} (V-1)^t``) and positions after EOS are dead (``mask`` False,
token ``eos``, context 0, log-probability 0). Contexts are numbered by depth, then
lexicographically in their tokens: row 0 is the empty prefix.

Source: TRM (T1-T13; exact ground truth), also used for DVP (P2) and OTB (O1).
Shapes: logits (P, V); seqs, mask, ctx, token_logp (N, T); seq_prob (N,).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

import torch

from tailtheory.core.checks import as_tensor, check_positive_int

MAX_SEQUENCES = 2**22
"""At most ~4.2M sequences are enumerated (``V^T`` of 10^6 takes about a second)."""

MAX_CELLS = 2**26
"""At most 2^26 entries in one ``(N, T)`` or ``(P, V)`` tensor (512 MiB in float64)."""


def tree_size(V: int, T: int, eos: int | None = None) -> tuple[int, int]:
    """``(P, N)``: number of contexts and of sequences of the tree, in exact integers."""
    V = check_positive_int(V, "V", 2 if eos is not None else 1)
    T = check_positive_int(T, "T")
    if eos is not None and not 0 <= eos < V:
        raise ValueError(f"eos must be a token id in [0, {V}), got {eos}")
    b = V if eos is None else V - 1
    P = sum(b**t for t in range(T))
    N = b**T if eos is None else sum(b**t for t in range(T + 1))
    return P, N


def check_enumerable(V: int, T: int, eos: int | None = None) -> tuple[int, int]:
    """Raise, before anything is allocated, when the tree is too large to enumerate."""
    P, N = tree_size(V, T, eos)
    if N > MAX_SEQUENCES or N * T > MAX_CELLS or P * V > MAX_CELLS:
        raise ValueError(
            f"V={V}, T={T}, eos={eos} gives {N:,} sequences ({N * T:,} cells) and {P:,} "
            f"contexts ({P * V:,} logits); the limit is {MAX_SEQUENCES:,} sequences and "
            f"{MAX_CELLS:,} cells per tensor")
    return P, N


@dataclass(frozen=True)
class _Tree:
    """The enumeration of one ``(V, T, eos)``: shared by every policy over the same tree."""

    seqs: torch.Tensor   # (N, T) long
    mask: torch.Tensor   # (N, T) bool
    ctx: torch.Tensor    # (N, T) long
    depth: torch.Tensor  # (P,) long


def _block(m: int, b: int, tokmap: torch.Tensor, T: int, eos: int | None):
    """The ``b^m`` sequences whose first ``m`` tokens are non-EOS (then EOS when ``m < T``)."""
    n = b**m
    idx = torch.arange(n, dtype=torch.long)[:, None]                    # (n, 1)
    t = torch.arange(T, dtype=torch.long)                               # (T,)
    offsets = torch.tensor([sum(b**s for s in range(k)) for k in range(T)], dtype=torch.long)
    alive = t <= min(m, T - 1)                                          # (T,)
    pow_ctx = torch.tensor([b ** max(m - k, 0) for k in range(T)], dtype=torch.long)
    ctx = torch.where(alive, offsets + idx // pow_ctx, 0)               # (n, T)
    pow_tok = torch.tensor([b ** max(m - 1 - k, 0) for k in range(T)], dtype=torch.long)
    digit = (idx // pow_tok) % max(b, 1)                                # (n, T)
    seqs = tokmap[digit]
    if eos is not None:
        seqs = torch.where(t < m, seqs, eos)
    return seqs, alive.expand(n, T).clone(), ctx


def enumerate_tree(V: int, T: int, eos: int | None = None) -> _Tree:
    """Every sequence once, with its alive positions and the context index of each position."""
    P, _ = check_enumerable(V, T, eos)
    tokens = torch.arange(V, dtype=torch.long)
    if eos is None:
        blocks = [_block(T, V, tokens, T, None)]
        b = V
    else:
        b = V - 1
        tokmap = tokens[tokens != eos]
        blocks = [_block(m, b, tokmap, T, eos) for m in range(T + 1)]
    seqs, mask, ctx = (torch.cat(parts) for parts in zip(*blocks))
    depth = torch.cat([torch.full((b**t,), t, dtype=torch.long) for t in range(T)])
    assert depth.numel() == P
    return _Tree(seqs, mask, ctx, depth)


class TabularPolicy:
    """A policy with one logit vector per context, every sequence enumerated exactly.

    Entries of ``logits`` may be ``-inf`` (a pruned token) but never NaN or ``+inf``, and every
    row keeps at least one finite entry.

    Shapes: logits (P, V); seqs, mask, ctx, token_logp (N, T); seq_prob (N,).
    """

    def __init__(self, logits, V: int, T: int, eos: int | None = None, _tree: _Tree | None = None):
        P, _ = check_enumerable(V, T, eos)
        z = as_tensor(logits, "logits")
        if z.shape != (P, V):
            raise ValueError(f"logits must have shape (P, V) = ({P}, {V}) for V={V}, T={T}, "
                             f"eos={eos}; got {tuple(z.shape)}")
        if torch.isnan(z).any() or (z == float("inf")).any():
            raise ValueError("logits must not contain NaN or +inf (-inf marks a pruned token)")
        dead_rows = torch.isinf(z).all(-1)
        if dead_rows.any():
            raise ValueError(f"logits rows {dead_rows.nonzero().flatten()[:5].tolist()} are all "
                             f"-inf; every context needs at least one finite logit")
        self.V, self.T, self.eos = int(V), int(T), eos
        self.logits = z
        self._tree = _tree if _tree is not None else enumerate_tree(V, T, eos)

    @classmethod
    def random(cls, V: int, T: int, eos: int | None = None, sharpness: float = 1.0,
               seed: int = 0) -> "TabularPolicy":
        """Standard normal logits times ``sharpness`` (0 = uniform, large = nearly greedy)."""
        if not sharpness >= 0 or sharpness == float("inf"):
            raise ValueError(f"sharpness must be finite and >= 0, got {sharpness}")
        P, _ = check_enumerable(V, T, eos)
        g = torch.Generator().manual_seed(seed)
        return cls(torch.randn(P, V, generator=g, dtype=torch.float64) * sharpness, V, T, eos)

    def with_logits(self, logits) -> "TabularPolicy":
        """The same tree with other logits ``(P, V)``."""
        return TabularPolicy(logits, self.V, self.T, self.eos, _tree=self._tree)

    def perturbed(self, scale: float, frac: float = 1.0, seed: int = 0) -> "TabularPolicy":
        """``pi_theta`` from ``pi_roll``: Gaussian noise of std ``scale`` added to the logits of
        a random fraction ``frac`` of the contexts (at least one). A small ``frac`` makes a
        sparse pair: large divergence at few, mostly rare, contexts (the regime where
        ``delta`` is large but ``D^seq_KL`` small)."""
        if not scale >= 0 or scale == float("inf"):
            raise ValueError(f"scale must be finite and >= 0, got {scale}")
        if not 0 < frac <= 1:
            raise ValueError(f"frac must lie in (0, 1], got {frac}")
        g = torch.Generator().manual_seed(seed)
        P = self.logits.shape[0]
        noise = torch.randn(P, self.V, generator=g, dtype=torch.float64) * scale
        k = max(1, round(frac * P))
        rows = torch.randperm(P, generator=g)[:k]
        hit = torch.zeros(P, dtype=torch.bool)
        hit[rows] = True
        return self.with_logits(self.logits + noise * hit[:, None])

    # -- the tree -------------------------------------------------------------------------------
    @property
    def seqs(self) -> torch.Tensor:
        return self._tree.seqs

    @property
    def mask(self) -> torch.Tensor:
        return self._tree.mask

    @property
    def ctx(self) -> torch.Tensor:
        return self._tree.ctx

    def context_depth(self) -> torch.Tensor:
        """``(P,)`` long: the position ``t`` (0 = empty prefix) each context is used at."""
        return self._tree.depth

    # -- probabilities --------------------------------------------------------------------------
    def probs(self) -> torch.Tensor:
        """``(P, V)`` softmax of the logits (a copy of a cached tensor)."""
        return self._probs.clone()

    def log_probs(self) -> torch.Tensor:
        """``(P, V)`` log-softmax of the logits, ``-inf`` at pruned tokens (a cached copy)."""
        return self._log_probs.clone()

    @cached_property
    def _log_probs(self) -> torch.Tensor:
        return torch.log_softmax(self.logits, -1)

    @cached_property
    def _probs(self) -> torch.Tensor:
        return self._log_probs.exp()

    @cached_property
    def token_logp(self) -> torch.Tensor:
        """``(N, T)`` ``log pi(y_t | c_t)`` at alive positions, 0 where dead."""
        lp = self._log_probs[self.ctx, self.seqs]                       # (N, T)
        return torch.where(self.mask, lp, torch.zeros((), dtype=lp.dtype))

    @cached_property
    def seq_prob(self) -> torch.Tensor:
        """``(N,)`` probability of each sequence; sums to 1."""
        return self.token_logp.sum(-1).exp()

    def expect(self, values) -> torch.Tensor:
        """``E_{y~pi}[values]``: values ``(N, ...)`` -> ``(...)``."""
        v = as_tensor(values, "values")
        if v.ndim == 0 or v.shape[0] != self.seqs.shape[0]:
            raise ValueError(f"values must have a leading sequence dimension of "
                             f"{self.seqs.shape[0]}, got shape {tuple(v.shape)}")
        return torch.tensordot(self.seq_prob, v, dims=1)

    def context_prob(self) -> torch.Tensor:
        """``(P,)`` probability that each context is reached (``d_t`` at its depth ``t``)."""
        return self._context_prob.clone()

    @cached_property
    def _context_prob(self) -> torch.Tensor:
        w = (self.seq_prob[:, None] * self.mask).flatten()              # (N*T,)
        out = torch.zeros(self.logits.shape[0], dtype=torch.float64)
        return out.index_add_(0, self.ctx.flatten(), w)

    def __repr__(self) -> str:
        return f"TabularPolicy(V={self.V}, T={self.T}, eos={self.eos}, P={self.logits.shape[0]})"


def random_rewards(pol: TabularPolicy, seed: int = 0) -> torch.Tensor:
    """``(N,)`` i.i.d. uniform rewards in [0, 1], one per sequence of ``pol``."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(pol.seqs.shape[0], generator=g, dtype=torch.float64)


def reference_enumeration(logits, V: int, T: int, eos: int | None = None) -> dict:
    """The slow reference: a loop over the definition, for the equivalence test.

    Contexts are listed by depth then lexicographically; each sequence is generated token by
    token and its probability is the product of the softmax of its contexts' rows.
    Returns ``{sequence tuple (alive tokens only): (probability, tuple of context rows)}``.
    """
    z = as_tensor(logits, "logits")
    non_eos = [v for v in range(V) if v != eos]
    rows = {}
    for t in range(T):
        for prefix in itertools.product(non_eos, repeat=t):
            rows[prefix] = len(rows)
    out = {}

    def walk(prefix: tuple, prob: float, used: tuple) -> None:
        if len(prefix) == T or (prefix and prefix[-1] == eos):
            out[prefix] = (prob, used)
            return
        row = rows[prefix]
        p = torch.softmax(z[row], -1)
        for v in range(V):
            walk(prefix + (v,), prob * float(p[v]), used + (row,))

    walk((), 1.0, ())
    return out


__all__ = ["TabularPolicy", "tree_size", "check_enumerable", "enumerate_tree", "random_rewards",
           "reference_enumeration", "MAX_SEQUENCES", "MAX_CELLS"]
