"""A token's decisiveness: how much the expected reward moves with it, by branch rollouts.

Source: the question LOPTI (Yang et al., arXiv 2505.12929) leaves open: its low-probability
tokens dominate the gradient (L1, L4), but the paper does not say whether they are the tokens
that decide the answer or free choices the reward never reads.

For a sampled response token ``y_t`` at prefix ``y_<t`` with probability ``p_t`` under the
sampling policy ``pi``::

    D = |E[R | y_<t, y_t] - E[R | y_<t]| = (1 - p_t) |Q(y_t) - Q(not y_t)|

``Q(y_t)`` is the expected reward of continuing from the prefix and ``y_t``; ``Q(not y_t)`` of
continuing from a token drawn from ``pi(. | y_<t)`` with ``y_t`` removed and renormalised (so
``p_t`` enters exactly). Both are estimated by ``K`` continuation rollouts each
(:func:`branch_values`), keeping the response's remaining length cap (a continuation cut by it
earns what a cut response earns). The ``2 K`` continuations of one prefix sit side by side and
share its prefill. The signed ``effect = (1 - p_t) (Q(y_t) - Q(not y_t))`` says whether the token
helped or hurt; ``gap = Q(y_t) - Q(not y_t)`` is reported beside ``D``.

Common random numbers (``sampler``, :data:`SAMPLERS`), seeded per probed token (``seed``,
response row, position), not from one sampler stream, so the pairing survives rows finishing at
different steps:

- ``coupled`` (the default of new measurements): continuation ``k`` of the two branches draws by
  Gumbel-max with the same noise for the same (word, piece, vocabulary id), keyed by ``(seed,
  row, t, k)`` (:mod:`tailtheory.lopti.decisive.coupled`): a synonym that shifts the token
  positions does not decouple the branches after it.
- ``inverse_cdf`` (the stored measurements of version 1): the ``j``-th token of both branches
  by the inverse CDF of the same uniform ``u[k, j]``; a shift of positions decouples them.

The standard error of the gap is that of the ``K`` paired differences.

Shapes: ``n`` probed tokens, ``K`` continuations a branch, ``V`` vocabulary.

Claims: L1-L6 (context: what the low-probability tokens of each recipe do; no verdict
rests on D alone).
"""

from __future__ import annotations

import numpy as np
import torch

from tailtheory.core.checks import check_positive_int
from tqdm.auto import tqdm

from tailtheory.core.forward import left_pad
from tailtheory.engine.rollout.engine import inverse_cdf
from tailtheory.engine.rollout.fast import InferenceEngine, unsupported
from tailtheory.engine.rollout.hf import HFDecode
from tailtheory.lopti.decisive.coupled import (advance_words, draw_rows, key_hash,
                                               prefix_words, word_starts)

ROWS_PER_CHUNK = 2048
"""Continuation rows decoded together at most (``2 K`` per probed token)."""

LOGIT_BUDGET = 2**26
"""Elements of one step's ``(rows, V)`` logits at most (256 MB in float32): at a large vocabulary
a chunk holds fewer rows (:func:`branch_rows`)."""


SAMPLERS = ("coupled", "inverse_cdf")
"""How the two branches share their randomness (module docstring); the first is the default."""

LEGACY_SAMPLER = "inverse_cdf"
"""The sampler of the measurements stored before the coupling: their configs do not name one
(:func:`sampler_config`), so they stay readable."""


def check_sampler(sampler: str) -> str:
    """``sampler`` if it is one of :data:`SAMPLERS`, else one clear error."""
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; valid: {', '.join(SAMPLERS)}")
    return sampler


def sampler_config(sampler: str) -> dict:
    """What a stored measurement's config holds of its sampler: nothing for
    :data:`LEGACY_SAMPLER` (the configs written before it existed), ``{"sampler": name}``
    otherwise."""
    return {} if check_sampler(sampler) == LEGACY_SAMPLER else {"sampler": sampler}


def branch_rows(vocab_size: int, K: int) -> int:
    """Rows decoded together: :data:`ROWS_PER_CHUNK`, fewer where ``rows x V`` would pass
    :data:`LOGIT_BUDGET`, never fewer than one probed token's ``2 K``."""
    return max(2 * K, min(ROWS_PER_CHUNK, LOGIT_BUDGET // max(int(vocab_size), 1)))


def decoder_of(model):
    """What :func:`branch_values` decodes with: the ``fast`` engine's float32 KV-cache decoder
    over ``model``'s weights (:class:`tailtheory.engine.rollout.fast.InferenceEngine`), or, for a
    model it cannot run, the model's own KV-cache forward (``hf``). An object with a
    ``start(ids, attn, T)`` method returning a decoding state (``logits``, ``rows``,
    ``advance``) is returned as is (a scripted policy)."""
    if hasattr(model, "start") and not hasattr(model, "config"):
        return model
    if unsupported(model) is None:
        return InferenceEngine(model, "float32")

    class _HF:
        def start(self, ids, attn, T):
            return HFDecode(model, ids, attn, attn.sum(1), T)
    return _HF()


def _uniforms(seed: int, row: int, t: int, K: int, T: int) -> torch.Tensor:
    """``(K, T)`` float64 uniforms of one probed token: continuation ``k``'s ``j``-th draw."""
    g = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(row)) * 10_007 + int(t))
    return torch.rand(K, T, generator=g, dtype=torch.float64)


def _draw(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``p (A, V)`` at the uniforms ``u (A,)`` (:func:`inverse_cdf`)."""
    return inverse_cdf(p, u[:, None].to(torch.float64))[:, 0]


def _check_positions(positions, responses) -> list[tuple[int, int]]:
    out = []
    for pos in positions:
        i, t = (int(x) for x in pos)
        if not 0 <= i < len(responses) or not 0 <= t < len(responses[i]):
            raise ValueError(f"position {(i, t)} is not a token of the responses (row in "
                             f"[0, {len(responses)}), t inside that response)")
        out.append((i, t))
    return out


@torch.no_grad()
def branch_values(model, task, problems, responses, positions, K: int, cap: int,
                  temperature: float = 1.0, seed: int = 0, rows_per_chunk: int | None = None,
                  progress: bool = False, sampler: str = SAMPLERS[0]) -> dict:
    """Branch rollouts of the probed tokens ``positions`` (``(row, t)`` pairs) of ``responses``.

    ``problems[row]``: the :class:`~tailtheory.engine.tasks.task.Problem` of response ``row``
    (its prompt and answer; rewarded by ``task.reward``); ``responses[row]``: its sampled ids up
    to and including EOS (or the cap); ``cap``: the rollout's ``max_new_tokens``; ``model``: a
    causal LM or a scripted policy (:func:`decoder_of`), sampled at ``temperature``;
    ``sampler``: one of :data:`SAMPLERS` (module docstring).

    Returns numpy arrays of length ``n``: ``row``, ``t``, ``token``, ``p`` (``p_t`` under the
    decoder), ``q_with``, ``q_without``, ``gap``, ``gap_se`` (paired, over ``K``), ``effect``
    (signed), ``D`` and ``D_se``; and ``rewards_with`` / ``rewards_without`` ``(n, K)``. Where
    ``y_t`` holds all of the decoder's mass there is no other branch: ``q_without``, ``gap`` and
    ``gap_se`` are NaN and ``D``, ``effect`` 0.
    """
    K = check_positive_int(K, "K", 2)
    sampler = check_sampler(sampler)
    cap = check_positive_int(cap, "cap")
    if rows_per_chunk is None:
        rows_per_chunk = branch_rows(task.vocab_size, K)
    check_positive_int(rows_per_chunk, "rows_per_chunk", 2 * K)
    if len(problems) != len(responses):
        raise ValueError(f"{len(problems)} problems for {len(responses)} responses")
    pos = _check_positions(positions, responses)
    if any(t >= cap for _, t in pos):
        raise ValueError(f"a probed position lies at or past the cap {cap}")
    dec = decoder_of(model)
    device = next(model.parameters()).device if hasattr(model, "parameters") else "cpu"
    per = max(1, rows_per_chunk // (2 * K))
    starts = word_starts(task) if sampler == "coupled" else None
    parts = []
    for c in tqdm(range(0, len(pos), per), desc="branch rollouts", unit="chunk",
                  disable=not progress):
        parts.append(_chunk(dec, task, problems, responses, pos[c:c + per], K, cap,
                            float(temperature), seed, device, starts))
    rw = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, K))
    ro = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, K))
    p = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0)
    tok = np.array([int(responses[i][t]) for i, t in pos], dtype=np.int64)
    gap = rw.mean(1) - ro.mean(1)            # NaN where y_t held all the mass: D is 0 there
    gap_se = (rw - ro).std(1, ddof=1) / np.sqrt(K) if len(pos) else np.zeros(0)
    D, D_se, effect = ((1 - p) * np.nan_to_num(x) for x in (np.abs(gap), gap_se, gap))
    return {"row": np.array([i for i, _ in pos], dtype=np.int64),
            "t": np.array([t for _, t in pos], dtype=np.int64), "token": tok, "p": p,
            "q_with": rw.mean(1), "q_without": ro.mean(1), "gap": gap, "gap_se": gap_se,
            "effect": effect, "D": D, "D_se": D_se,
            "rewards_with": rw, "rewards_without": ro, "K": K}


class _InverseCDF:
    """The ``inverse_cdf`` sampler of one chunk: row ``b``'s ``j``-th token at ``u[b, j]``."""

    def __init__(self, seed, pos, K, cap, T):
        # the table is as wide as the cap whatever the chunk: a token's uniforms are its own
        u = torch.stack([_uniforms(seed, i, t, K, cap)[:, :T] for i, t in pos])  # (n, K, T)
        self.u = u[:, None].expand(len(pos), 2, K, T).reshape(len(pos) * 2 * K, T)

    def draw(self, p, r, j):
        return _draw(p, self.u[r, j])

    def advance(self, tok, alive):
        pass


class _Coupled:
    """The ``coupled`` sampler of one chunk: Gumbel-max keyed by ``(seed, row, t, k)``, word and
    piece (:mod:`tailtheory.lopti.decisive.coupled`); both branches of pair ``k`` share a seed
    and start from the word state of the prefix before ``y_t``."""

    def __init__(self, seed, pos, K, responses, starts):
        pair = torch.tensor([[int(seed), i, t, k] for i, t in pos for _ in range(2)
                             for k in range(K)], dtype=torch.int64)               # (B, 4)
        self.seed = key_hash(*pair.T)                                             # (B,)
        words = [prefix_words(responses[i][:t], starts) for i, t in pos]
        w = torch.tensor(words, dtype=torch.int64).repeat_interleave(2 * K, 0)   # (B, 2)
        self.S, self.m, self.starts = w[:, 0], w[:, 1], starts

    def draw(self, p, r, j):
        return draw_rows(torch.log(p), self.seed[r], self.S[r], self.m[r],
                         self.starts[:p.shape[-1]])

    def advance(self, tok, alive):
        S, m = advance_words(self.S, self.m, tok, self.starts)
        self.S, self.m = torch.where(alive, S, self.S), torch.where(alive, m, self.m)


def _chunk(dec, task, problems, responses, pos, K, cap, tau, seed, device, starts=None):
    """Rewards ``(n, K)`` of both branches and ``p_t (n,)`` of the probed tokens ``pos``; the
    ``coupled`` sampler with ``starts`` (:func:`~tailtheory.lopti.decisive.coupled.word_starts`),
    else ``inverse_cdf``."""
    n = len(pos)
    prefixes = [list(problems[i].prompt_ids) + [int(x) for x in responses[i][:t]] for i, t in pos]
    rows = [pre for pre in prefixes for _ in range(2 * K)]            # probe, branch, k
    ids, attn, _ = left_pad(rows, task.pad_id, task.vocab_size)
    ids, attn = ids.to(device), attn.to(device)
    left = torch.tensor([cap - t for _, t in pos]).repeat_interleave(2 * K)  # tokens a row may add
    T = int(left.max())
    state = dec.start(ids, attn, T)
    z = state.logits.float().cpu()                                           # (B, V) at start
    p0 = torch.softmax(z / tau if tau != 1.0 else z, -1)
    y = torch.tensor([int(responses[i][t]) for i, t in pos])
    first_rows = torch.arange(n) * 2 * K
    p_t = p0[first_rows, y].double()                                         # (n,)
    yr = y.repeat_interleave(2 * K)
    without = torch.arange(n * 2 * K) % (2 * K) >= K                         # branch B rows
    pb = p0[without].clone()
    pb[torch.arange(len(pb)), yr[without]] = 0.0                             # y_t removed
    alone = (pb.sum(-1) <= 0).view(n, K)[:, 0]        # y_t holds all the mass: no other branch
    draws = (_InverseCDF(seed, pos, K, cap, T) if starts is None
             else _Coupled(seed, pos, K, responses, starts))
    first = yr.clone()
    first[without] = draws.draw(pb, without.nonzero()[:, 0], 0)
    B = len(rows)
    draws.advance(first, torch.ones(B, dtype=torch.bool))
    out = [first]
    stops = torch.tensor(task.stop_ids)
    alive = ~torch.isin(first, stops) & (left > 1)
    count = torch.ones(B, dtype=torch.long)
    tok = first
    j = 0
    while alive.any():
        j += 1
        state.advance(tok.to(device), alive.to(device))
        r = state.rows.cpu() if state.rows is not None else torch.arange(B)
        live = alive[r]
        r, z = r[live], state.logits.float().cpu()[live]
        p = torch.softmax(z / tau if tau != 1.0 else z, -1)
        tok = torch.full((B,), int(task.pad_id), dtype=torch.long)
        tok[r] = draws.draw(p, r, j)
        tok = torch.where(alive, tok, task.pad_id)
        draws.advance(tok, alive)
        out.append(tok)
        count += alive.long()
        alive = alive & ~torch.isin(tok, stops) & (count < left)
    gen = torch.stack(out, 1)                                                # (B, steps)
    rewards = np.zeros(B)
    for b in range(B):
        i, t = pos[b // (2 * K)]
        m = int(count[b])
        seq = [int(x) for x in responses[i][:t]] + gen[b, :m].tolist()
        rewards[b] = task.reward(problems[i], seq).total
    rewards = rewards.reshape(n, 2, K)
    rewards[alone.numpy(), 1] = np.nan
    return rewards[:, 0], rewards[:, 1], p_t.numpy()
