"""Samples beyond the run's numerical noise (``tailtheory.diagnose.sections.beyond_noise``, M3):
the false-alarm rate over simulated clean dumps (real bf16, fp16 and KV-cache paths of two tiny
models, heavy-tailed synthetic noise) and the recall of a context shifted in 5% and 20% of the
samples; the pieces against their definitions; planted faults against their clean twins in
every format; streaming; the bottom line; the docs' worked example on its committed fixture."""

import math

import numpy as np
import pytest
import torch

from tailtheory.diagnose.quantum import quantum_of, storage_of
from tailtheory.diagnose.sections.beyond_noise import (ALPHA, NB, beyond_eps, beyond_noise, bh,
                                                       eps_columns)
from tailtheory.mismatch.logprob import mismatch_bound
from tailtheory.mismatch.real import m7_model, paired_logits, random_input_ids

POOL_B, POOL_T, PREFIX = 96, 32, 8
"""The pool of real samples: 96 random contexts of 32 tokens per model and path; the first 8
are the prefix a shifted context replaces, the other 24 the sample's tokens."""
SIZES = {"small": dict(hidden=64, layers=2), "large": dict(hidden=128, layers=3)}
"""The two tiny models (M7's random-init LM, sharpened)."""
PATHS = ("bf16", "fp16", "kv")
"""The real inference paths against the float32 trainer."""
STORAGE = ("float64", "float32", "bfloat16", "decimals:4")
"""How a simulated dump stores its log-probs."""


@pytest.fixture(scope="module")
def pool():
    """Per (size, path): the trainer's, the sampler's and a shifted context's log-probs of
    tokens the sampler drew, ``(POOL_B, POOL_T - PREFIX)`` each. The shifted context is the
    trainer scoring the same tokens after another prefix."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    try:
        for seed, (size, kw) in enumerate(SIZES.items()):
            model = m7_model(seed=seed, **kw)
            ids = random_input_ids(model.config.vocab_size, POOL_B, POOL_T, seed=seed)
            other = ids.clone()
            other[:, :PREFIX] = random_input_ids(model.config.vocab_size, POOL_B, PREFIX,
                                                 seed=seed + 10)
            z_shift = paired_logits(model, other, "kv")[0][:, PREFIX:]
            g = torch.Generator().manual_seed(seed)
            for path in PATHS:
                z_train, z_roll = (z[:, PREFIX:] for z in paired_logits(model, ids, path))
                y = torch.multinomial(torch.softmax(z_roll, -1).flatten(0, 1), 1,
                                      generator=g).view(POOL_B, -1, 1)
                out[size, path] = tuple(torch.log_softmax(z, -1).gather(-1, y)[..., 0].numpy()
                                        for z in (z_train, z_roll, z_shift))
    finally:
        torch.set_num_threads(before)
    return out


def synthetic(rng, S, shifted, T=24, V=16):
    """Log-probs ``(S, T)`` of tokens sampled from logits ``z + sigma t_df`` against ``z`` (a
    head token in half the positions): Student-t noise of ``df`` 2, 3 or 5, ``sigma`` between
    1e-3 and 3e-2 and 35% larger or smaller from sample to sample; the samples ``shifted``
    are scored by the trainer in another context (independent logits)."""
    z = rng.normal(0, 2, (S, T, V))
    z[..., 0] += 6 * (rng.random((S, T)) < 0.5)
    sigma = 10 ** rng.uniform(-3, -1.5) * np.exp(0.3 * rng.normal(size=(S, 1, 1)))
    z_roll = z + sigma * rng.standard_t(rng.choice([2, 3, 5]), (S, T, V))
    z_train = z.copy()
    z_train[shifted] = rng.normal(0, 2, (len(shifted), T, V))
    lp_roll = z_roll - np.logaddexp.reduce(z_roll, -1, keepdims=True)
    lp_train = z_train - np.logaddexp.reduce(z_train, -1, keepdims=True)
    y = (np.cumsum(np.exp(lp_roll), -1) < rng.random((S, T, 1))).sum(-1).clip(0, V - 1)
    return (np.take_along_axis(lp_train, y[..., None], -1)[..., 0],
            np.take_along_axis(lp_roll, y[..., None], -1)[..., 0])


def stored(x, kind):
    """``x`` as a writer storing ``kind`` leaves it."""
    if kind.startswith("decimals:"):
        return np.round(x, int(kind.split(":")[1]))
    return torch.from_numpy(x).to(getattr(torch, kind)).double().numpy()


def simulated(rng, pool, real: bool, S=80, share=0.0):
    """One simulated dump's per-sample histograms ``(S, NB)`` and its shifted samples: ``S``
    samples of 8 to 24 tokens, from the pool of one model and path (drawn without replacement)
    or synthetic, ``share`` of them in a shifted context, stored as one of :data:`STORAGE`."""
    shifted = rng.choice(S, round(share * S), replace=False)
    if real:
        keys = list(pool)
        lt, lr, ls = pool[keys[rng.integers(len(keys))]]
        rows = rng.choice(len(lt), S, replace=False)
        lt, lr = lt[rows].copy(), lr[rows]
        lt[shifted] = ls[rows[shifted]]
    else:
        lt, lr = synthetic(rng, S, shifted)
    kind = STORAGE[rng.integers(len(STORAGE))]
    lt, lr = stored(lt, kind), stored(lr, kind)
    keep = np.arange(lt.shape[1]) < rng.integers(8, lt.shape[1] + 1, S)[:, None]
    lt, lr, idx = lt[keep], lr[keep], np.nonzero(keep)[0]
    q = quantum_of(storage_of(lt, lr), lt, lr)
    H = np.zeros((S, NB), np.int64)
    np.add.at(H, (idx, eps_columns(beyond_eps(lt, np.abs(lr - lt), q))), 1)
    return H, shifted


def test_false_alarms_and_recall_on_simulated_dumps(pool):
    """Over 200 clean dumps (half real paths, half heavy-tailed synthetic noise) at most
    ``alpha + 3 sd`` of them flag a sample; a context shifted in 5% of the samples is flagged
    in at least 90% of them, and so is one in 20% (the minority does not hide itself)."""
    n = 200
    alarms = sum(beyond_noise(simulated(np.random.default_rng(i), pool, i % 2 == 0)[0])
                 ["flagged"].any() for i in range(n))
    assert alarms / n <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / n), alarms
    for share, seeds in ((0.05, range(1000, 1060)), (0.2, range(2000, 2030))):
        found = []
        for i in seeds:
            H, shifted = simulated(np.random.default_rng(i), pool, i % 2 == 0, share=share)
            found.append(beyond_noise(H)["flagged"][shifted])
        assert np.concatenate(found).mean() >= 0.9, share


def test_bh_against_its_definition():
    """Benjamini-Hochberg rejects the largest ``k`` with ``p_(k) <= k alpha / m`` and every
    smaller p; its adjusted p-values are monotone in p."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = np.concatenate([rng.uniform(0, 1, 30), rng.uniform(0, 0.01, rng.integers(0, 5))])
        adj, rej = bh(p)
        srt = np.sort(p)
        ok = np.flatnonzero(srt <= ALPHA * np.arange(1, len(p) + 1) / len(p))
        assert rej.sum() == (ok[-1] + 1 if len(ok) else 0)
        assert (p[rej].max(initial=0) <= p[~rej].min(initial=1))
        assert np.all(np.diff(adj[np.argsort(p)]) >= 0)


def test_envelope_and_quantum():
    """``beyond_eps`` inverts M3's exact bound (``mismatch_bound``) widened by the quantum,
    with ``1 - p = -expm1(log p)`` exact near ``p = 1`` (where ``1 - exp(log p)`` loses every
    digit); the storage is read from the values."""
    logp = np.array([-0.01, -0.7, -5.0, -1e-6, -1e-12])
    eps = np.array([0.1, 0.003, 0.5, 0.03, 0.01])
    q = 1e-4
    bound = mismatch_bound(torch.from_numpy(np.exp(logp[:3])), torch.from_numpy(eps[:3]),
                           "exact").numpy()
    np.testing.assert_allclose(beyond_eps(logp[:3], bound + q, q), eps[:3], rtol=1e-9)
    near = np.log1p(-np.expm1(logp[3:]) * np.expm1(2 * eps[3:]))    # 2e-8 and 2e-14
    np.testing.assert_allclose(beyond_eps(logp[3:], near, 0.0), eps[3:], rtol=1e-6)
    assert beyond_eps(np.array([0.0]), np.array([1e-3]), 0.0)[0] == np.inf
    assert beyond_eps(np.array([-1.0]), np.array([1e-5]), 1e-4)[0] == 0
    x = np.random.default_rng(0).normal(-2, 1, 500)
    assert storage_of(np.round(x, 3), np.round(x - 0.01, 3)) == "decimals:3"
    assert storage_of(x.astype(np.float32).astype(float), x.astype(np.float32) + 0.0) \
        == "float32"
    assert storage_of(stored(x, "bfloat16"), stored(x - 0.1, "bfloat16")) == "bfloat16"
    assert storage_of(x, x - 1e-3) == "float64"
