"""Branch rollouts coupled by word: Gumbel-max noise keyed by (word, piece, vocabulary id).

Source: issue 59 part 0 (the decisiveness of :mod:`tailtheory.lopti.decisive.branches` with its
noise shown). Gumbel-max: ``argmax_v (log p_v + g_v)`` with ``g_v`` iid standard Gumbel is a draw
from ``p`` (Gumbel 1954; Maddison et al., arXiv 1411.0030). Two branches that use the same
``g`` draw the same token wherever their ``p`` agree, and tokens of close probability where they
differ little.

The inverse-CDF common random numbers of the first measurements pair the ``j``-th token of the
two branches: a synonym of two pieces against one of one piece shifts every later position, and
the pairing is lost for the rest of the continuation. Here the noise of vocabulary id ``v`` is a
function of ``(seed, word, piece, v)``: ``word`` is the index of the whitespace-separated word
``v`` would fall in and ``piece`` its index inside that word (0 for a word's first token), both
counted from the response's start, so after a synonym the next word's tokens meet the same noise
in both branches whatever the number of pieces before. Whether ``v`` starts a word is read from
the tokenizer once (:func:`word_starts`); a candidate that starts one has key ``(S, 0)`` after
``S`` word-starting tokens, one that continues has ``(S - 1, m)`` after ``m`` tokens of the
current word.

The noise is counter-based: SplitMix64 (Steele et al., OOPSLA 2014) of the key, its top 53 bits
a uniform ``u`` in ``(0, 1)``, ``g = -log(-log u)``; vectorised in int64 torch (products wrap
modulo ``2**64``; right shifts are made logical by a mask). :func:`splitmix64_ref` is the
definition in Python integers that the tests hold the torch code to.

Shapes: ``A`` rows drawn together, ``V`` vocabulary.
"""

from __future__ import annotations

import torch

from tailtheory.core.stats import row_blocks

MASK64 = (1 << 64) - 1
"""Python integers modulo ``2**64``."""

GOLDEN = 0x9E3779B97F4A7C15
"""SplitMix64's increment (the golden ratio in 64 bits)."""

MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
"""SplitMix64's two finaliser multipliers."""

U53 = 2.0 ** -53
"""A uniform's resolution: the hash's top 53 bits, offset by half a step (never 0 or 1)."""


def _signed(x: int) -> int:
    """A 64-bit constant as the int64 torch holds it."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 ``x`` by ``s`` bits."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 of each int64 of ``x`` (any shape), as :func:`splitmix64_ref` on its bits."""
    z = x + _signed(GOLDEN)
    z = (z ^ _shr(z, 30)) * _signed(MIX1)
    z = (z ^ _shr(z, 27)) * _signed(MIX2)
    return z ^ _shr(z, 31)


def splitmix64_ref(x: int) -> int:
    """SplitMix64 of the 64-bit integer ``x`` (Steele et al., 2014), in Python integers."""
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def key_hash(*parts) -> torch.Tensor:
    """The hash of a key of int64 ``parts`` (tensors or ints, broadcast): SplitMix64 chained,
    ``h = splitmix64(h ^ part)`` from ``h = 0``."""
    h = torch.zeros((), dtype=torch.int64)
    for part in parts:
        h = splitmix64(h ^ torch.as_tensor(part, dtype=torch.int64))
    return h


def key_hash_ref(*parts: int) -> int:
    """:func:`key_hash` of Python integers (two's complement below zero)."""
    h = 0
    for part in parts:
        h = splitmix64_ref(h ^ (int(part) & MASK64))
    return h


def to_uniform(h: torch.Tensor) -> torch.Tensor:
    """Float64 uniforms in ``(0, 1)`` from hashes: the top 53 bits plus half a step."""
    return (_shr(h, 11).double() + 0.5) * U53


def gumbel(seed: torch.Tensor, word: torch.Tensor, piece: torch.Tensor, V: int) -> torch.Tensor:
    """Standard Gumbel noise ``(A, V)`` of the keys ``(seed[a], word[a], piece[a], v)``;
    ``seed``, ``word``, ``piece``: int64 ``(A,)``."""
    row = key_hash(seed, word, piece)[:, None]                               # (A, 1)
    u = to_uniform(splitmix64(row ^ torch.arange(V, dtype=torch.int64)))     # (A, V)
    return -torch.log(-torch.log(u))


def word_starts(task) -> torch.Tensor:
    """Bool ``(V,)``: whether id ``v`` starts a whitespace-separated word after a word, read from
    ``task``'s tokenizer: the text ``v`` adds after its first task word begins with whitespace
    (a word-level tokenizer's every id; byte-level BPE's ``Ġ`` pieces; SentencePiece's ``▁``).
    Ids past the tokenizer's own (padding rows) count as starting one."""
    first = task.encode(task.words[0])
    head = task.decode(first)
    n = min(task.n_tokens, task.vocab_size)
    texts = task.tokenizer.batch_decode([first + [v] for v in range(n)],
                                        skip_special_tokens=False,
                                        clean_up_tokenization_spaces=False)
    out = torch.ones(task.vocab_size, dtype=torch.bool)
    out[:n] = torch.tensor([t[len(head):][:1].isspace() for t in texts], dtype=torch.bool)
    return out


def candidate_noise(seed, n_starts, n_pieces, starts: torch.Tensor) -> torch.Tensor:
    """Gumbel noise ``(A, V)`` of every candidate of ``A`` rows, each row after ``n_starts``
    word-starting tokens and ``n_pieces`` tokens since the last (int64 ``(A,)``): a candidate
    that starts a word has key ``(n_starts, 0)``, one that continues ``(n_starts - 1,
    n_pieces)`` (module docstring); ``starts``: :func:`word_starts`."""
    V = len(starts)
    new = gumbel(seed, n_starts, torch.zeros_like(n_starts), V)
    cont = gumbel(seed, n_starts - 1, n_pieces, V)
    return torch.where(starts[None, :], new, cont)


def draw_rows(logp: torch.Tensor, seed, n_starts, n_pieces, starts: torch.Tensor) -> torch.Tensor:
    """:func:`coupled_draw` of :func:`candidate_noise`, a block of rows at a time
    (:func:`~tailtheory.core.stats.row_blocks`), so the int64 and float64 temporaries of the
    noise stay a few ``2**22``-element blocks at any vocabulary. Shapes: logp ``(A, V)``, the
    keys ``(A,)`` -> ``(A,)``."""
    out = torch.empty(len(logp), dtype=torch.int64)
    for b in row_blocks(len(logp), logp.shape[-1]):
        out[b] = coupled_draw(logp[b], candidate_noise(seed[b], n_starts[b], n_pieces[b], starts))
    return out


def coupled_draw(logp: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """One token per row of ``logp (A, V)`` (log-probabilities, ``-inf`` off the support):
    ``argmax(logp + noise)``. Returns ``(A,)`` int64."""
    return (logp.double() + noise).argmax(-1)


def advance_words(n_starts: torch.Tensor, n_pieces: torch.Tensor, tok: torch.Tensor,
                  starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The word state after each row emits ``tok (A,)``: a word-starting token counts a word
    and one piece, another one more piece."""
    s = starts[tok]
    return n_starts + s.long(), torch.where(s, torch.ones_like(n_pieces), n_pieces + 1)


def prefix_words(ids: list[int], starts: torch.Tensor) -> tuple[int, int]:
    """``(n_starts, n_pieces)`` after the ids of a response's prefix (:func:`advance_words`)."""
    S, m = 0, 0
    for v in ids:
        S, m = (S + 1, 1) if bool(starts[int(v)]) else (S, m + 1)
    return S, m
