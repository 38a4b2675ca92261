"""Samples beyond the run's numerical noise (``tailtheory.diagnose.sections.beyond_noise``, M3):
the false-alarm rate over simulated clean dumps (real bf16, fp16 and KV-cache paths of two tiny
models, heavy-tailed synthetic noise) and the recall of a context shifted in 5% and 20% of the
samples; the pieces against their definitions; planted faults against their clean twins in
every format; streaming; bad input; the bottom line; the docs' worked example on its committed
fixture."""

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.cli import DEFAULT_RHOS, HEAD_P, TAIL_P, diagnose_dumps
from tailtheory.diagnose.quantum import quantum_of, storage_of
from tailtheory.diagnose.read import BATCH_ROWS, expand_dumps, iter_batches, open_dumps
from tailtheory.diagnose.sections import beyond_noise as noise
from tailtheory.diagnose.sections.base import Context, Diagnosis, complete
from tailtheory.diagnose.sections.beyond_noise import (ALPHA, EDGES, NB, SECTION, beyond_eps,
                                                       beyond_noise, bh, eps_columns,
                                                       sample_statistic, sample_tests)
from tailtheory.mismatch.logprob import mismatch_bound
from tailtheory.mismatch.real import m7_model, paired_logits, random_input_ids

from ..conftest import summaries_close
from ..formats.framework_dumps import nemo_rl_dump, prime_rl_dump, slime_dump
from ..planted import (COMMITTED, DATA, NOISE_SHIFTED, engine_dump, generic_dump,
                       noise_responses, planted_responses, same_records)
from .conftest import drawn
from .test_certify import _doc_block

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


@pytest.mark.slow
def test_k_is_the_smallest_that_keeps_false_alarms_within_alpha(pool):
    """``K`` (the robust sd between the run's centre and ``eps_hat``) as chosen: over 600
    clean simulated dumps, ``K = 3`` flags a sample in more than ``alpha`` of them and ``K = 4``
    in at most ``alpha``, while finding a context shifted in 5% of the samples at 0.95 or more
    (``beyond_noise.K``'s numbers)."""
    clean = [simulated(np.random.default_rng(10 ** 5 + i), pool, i % 2 == 0)[0]
             for i in range(600)]
    rate = {k: np.mean([beyond_noise(H, k=k)["flagged"].any() for H in clean]) for k in (3, 4)}
    assert rate[3] > ALPHA >= rate[4], rate
    shifted = [simulated(np.random.default_rng(10 ** 6 + i), pool, i % 2 == 0, share=0.05)
               for i in range(200)]
    assert np.concatenate([beyond_noise(H, k=noise.K)["flagged"][s] for H, s in shifted]) \
        .mean() >= 0.95 and noise.K == 4


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
    digit); the storage itself is ``tests/diagnose/test_quantum.py``."""
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


def test_the_designs_parts_matter(pool, monkeypatch):
    """What the design guards against, on the same simulated dumps: a plain high quantile of
    all tokens as the envelope lets a 20% minority in another context hide itself, and a
    binomial test (no intra-sample correlation) flags clean samples' heterogeneity in more
    than ``alpha + 3 sd`` of the clean dumps."""
    found = []
    for i in range(2000, 2030):
        H, shifted = simulated(np.random.default_rng(i), pool, i % 2 == 0, share=0.2)
        tot = np.cumsum(H.sum(0))
        edge = min(int((tot < 0.99 * tot[-1]).sum()), len(EDGES) - 1)
        found.append(bh(sample_tests(H, edge, sample_statistic(H))["p"])[1][shifted])
    assert np.concatenate(found).mean() < 0.1
    monkeypatch.setattr(noise, "RHO_MAX", 0.0)
    n = 200
    alarms = sum(beyond_noise(simulated(np.random.default_rng(i), pool, i % 2 == 0)[0])
                 ["flagged"].any() for i in range(n))
    assert alarms / n > ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / n), alarms


def test_counts_against_the_bound_token_by_token(run):
    """Each sample's tokens beyond the envelope, read from its histogram, are those with
    ``|Delta| > bound(p, eps_hat) + q`` by ``mismatch_bound`` token by token (float64 JSON: q
    of 2^-53); its statistic is the upper edge of the column of its (lower) median ``eps``; the
    figure draws the table."""
    acc, d, recs = run
    t = d.tables["beyond_noise"].set_index(["step", "sample_id"])
    r = d.summary["beyond_noise"]
    df = pd.DataFrame(recs)
    df["a"] = (df.logp_rollout - df.logp_train).abs()
    df["q"] = 2.0 ** -53 * (df.logp_train.abs() + df.logp_rollout.abs())
    bound = mismatch_bound(torch.from_numpy(np.exp(df.logp_train.to_numpy())),
                           torch.tensor(r["eps_hat"]), "exact").numpy()
    df["beyond"] = df.a - df.q > bound
    df["eps"] = beyond_eps(df.logp_train, df.a, df.q)
    lower_median = lambda e: np.sort(e)[math.ceil(len(e) / 2) - 1]  # noqa: E731
    want = df.groupby(["step", "sample_id"]).agg(beyond=("beyond", "sum"), n=("a", "size"),
                                                 eps=("eps", lower_median))
    assert (t.loc[want.index, "beyond"] == want.beyond).all() and want.beyond.sum() > 0
    assert (t.loc[want.index, "tokens"] == want.n).all()
    upper = EDGES[np.clip(eps_columns(want.eps.to_numpy()), 0, len(EDGES) - 1)]
    np.testing.assert_allclose(np.log10(t.loc[want.index, "median_eps"]), upper, atol=1e-12)
    assert r["precision"] == ["float64, 2^-53 |log p|"] and r["samples"] == len(t)
    assert drawn(SECTION, d) is d.tables["beyond_noise"]


def _section(path, batch_rows=BATCH_ROWS, dtype=None) -> Diagnosis:
    """This section alone on the dump at ``path`` (the report's other sections left out;
    ``dtype``: ``--dtype``)."""
    files = expand_dumps([path])
    opened = open_dumps(files)
    acc = Accumulator(files, TAIL_P, HEAD_P, DEFAULT_RHOS, 0.05, kinds=[x.kind for x in opened],
                      sections=(SECTION,), dumps=opened)
    for i, dump in enumerate(opened):
        for b in iter_batches(dump, i, batch_rows):
            acc.add(b)
    d = Diagnosis(summary={})
    SECTION.table(Context(acc, complete(acc), 0.05, 0.01, dtype=dtype), d)
    return d


def _found(path, **kw) -> tuple[set, dict]:
    r = _section(path, **kw).summary["beyond_noise"]
    return {(x["step"], x["sample_id"]) for x in r["flagged"]}, r


@pytest.fixture(scope="module")
def committed():
    """The whole report on the committed fixture, as ``tailtheory diagnose`` reads it."""
    return diagnose_dumps([DATA / "beyond_noise.jsonl"], register=[])


def test_planted_in_every_format_and_their_clean_twins(tmp_path):
    """A context shifted in two of 40 samples is found, and only there, in the generic
    format (JSON lines and parquet), NeMo-RL's, prime-rl's, slime's and this engine's dumps;
    their clean twins flag none; each names how it stores its log-probs."""
    planted, clean = noise_responses(decimals=None), noise_responses((), decimals=None)
    writers = {"generic": lambda p, rs: generic_dump(p.with_suffix(".jsonl"), rs),
               "nemo-rl": nemo_rl_dump, "prime-rl": prime_rl_dump, "slime": slime_dump,
               "engine": lambda p, rs: engine_dump(p, rs, "ones")}
    storage = {"generic": "float64", "nemo-rl": "float64", "prime-rl": "float64",
               "slime": "float32", "engine": "float64"}
    for name, write in writers.items():
        found, r = _found(write(tmp_path / name, planted))
        assert found == set(NOISE_SHIFTED) and r["flagged_k3_share"] > 0.5, name
        assert r["precision"][0].startswith(storage[name]) and r["lacks"] == [], name
        assert _found(write(tmp_path / f"{name}_clean", clean))[0] == set(), name


def test_a_file_without_steps_is_named(tmp_path):
    """A parquet file without ``step`` (its sample ids unique over the run) is read, its
    planted samples found by sample id, and the file named."""
    rows = [dict(sample_id=100 * r["step"] + r["i"], position=t, token_id=r["resp"][t],
                 logp_train=r["lp_train"][t], logp_rollout=r["lp_roll"][t])
            for r in noise_responses(decimals=None) for t in range(len(r["resp"]))]
    path = tmp_path / "nostep.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    found, r = _found(path)
    assert found == {(0, 100 * s + i) for s, i in NOISE_SHIFTED} and r["lacks"] == [
        {"file": str(path), "columns": ["step"]}]
    assert _section(path).verdicts["beyond_noise"][-1] == \
        f"no column step in 1 file ({path}): their samples are told apart by sample_id alone."


def test_streaming_gives_the_one_pass_answer(tmp_path):
    """Three rows at a time give what one batch gives: the JSON file's rounding is read from
    its first rows, whatever the batch."""
    path = COMMITTED["beyond_noise.jsonl"](tmp_path / "b.jsonl")
    a, b = (_section(path, batch_rows=n).summary["beyond_noise"] for n in (3, 10 ** 6))
    summaries_close(a, b)
    assert a["precision"] == b["precision"] == ["JSON decimals rounded to 3 places, 1e-3 per Delta"]


def test_run_wide_checks_planted_against_their_clean_twin(tmp_path):
    """A sampler at temperature 0.97, a truncated sampler (``Delta = -log pi(S)`` of 0.01 to
    0.05) and a noise of sd 0.5 are each flagged by their check, and only by it; the clean
    twin (a noise of sd 0.002) by none.
    bfloat16 values in a JSON file are read as the dump's declared dtype."""
    base = planted_responses(per_step=4, lengths=(8,), sd=0.0, seed=7, decimals=None)
    rng = np.random.default_rng(7)
    noisy = lambda r: r["lp_train"] + rng.normal(0, 0.002, len(r["resp"]))  # noqa: E731
    cases = {"clean": lambda r: noisy(r),
             "temperature": lambda r: np.minimum(noisy(r) / 0.97, 0.0),
             "truncation": lambda r: np.minimum(noisy(r) + rng.uniform(0.01, 0.05), 0.0),
             "rounding": lambda r: np.minimum(r["lp_train"] + rng.normal(0, 0.5, len(r["resp"])),
                                              0.0)}
    for name, roll in cases.items():
        path = generic_dump(tmp_path / f"{name}.jsonl", [dict(r, lp_roll=roll(r)) for r in base])
        r = _section(path).summary["beyond_noise"]
        assert [c["name"] for c in r["checks"] if c["flagged"]] == \
            ([] if name == "clean" else [name]), (name, r["checks"])
    bf = [dict(r, lp_train=stored(r["lp_train"], "bfloat16"),
               lp_roll=stored(noisy(r), "bfloat16")) for r in base]
    r = _section(generic_dump(tmp_path / "bf.jsonl", bf)).summary["beyond_noise"]
    assert r["precision"] == ["bfloat16, 2^-8 |log p|"]
    assert r["checks"][0]["dtype"] == "bfloat16" and r["checks"][0]["source"] == "stored"
    # --dtype overrides what the storage suggests: float16's rounding is 8x finer, so the |z|
    # that would explain the same noise level is 8x larger
    f16 = _section(tmp_path / "bf.jsonl", dtype="float16")
    c16 = f16.summary["beyond_noise"]["checks"][0]
    assert c16["dtype"] == "float16" and c16["source"] == "declared"
    assert c16["value"] == pytest.approx(8 * r["checks"][0]["value"])
    assert "as --dtype declares it" in noise.check_line(c16)
    clean = _section(tmp_path / "clean.jsonl").summary["beyond_noise"]["checks"][0]
    assert clean["source"] == "assumed" and "the dtype assumed" in noise.check_line(clean)
    with pytest.raises(ValueError, match="--dtype must be one of"):
        diagnose_dumps([tmp_path / "clean.jsonl"], dtype="int8")


def test_bad_input_and_degenerate_runs(tmp_path):
    """The functions refuse bad input with one line; a run whose two columns are equal has
    no noise, flags nothing, and its correlation is not available."""
    for H in (np.zeros((0, NB)), np.ones((3, NB - 1)), -np.ones((2, NB)), np.zeros((2, NB))):
        with pytest.raises(ValueError, match=r"beyond_noise needs per-sample counts") as e:
            beyond_noise(H)
        assert "\n" not in str(e.value)
    for p, alpha in (([0.1, 1.5], 0.05), ([0.1], 0.0), ([[0.1]], 0.05)):
        with pytest.raises(ValueError, match="bh needs p-values in"):
            bh(p, alpha)
    resps = planted_responses(per_step=3, sd=0.0, seed=5, decimals=None)
    r = _section(generic_dump(tmp_path / "eq.jsonl", resps)).summary["beyond_noise"]
    assert r["beyond_tokens"] == 0 and r["flagged"] == [] and r["eps_hat"] < 1e-9
    assert r["checks"][1]["value"] is None or math.isnan(r["checks"][1]["value"])


def test_the_bottom_line_and_the_table(committed):
    """On the committed fixture the bottom line names the samples beyond the noise; the table
    (``beyond_noise.csv``) has one row per sample."""
    s, t = committed.summary, committed.tables["beyond_noise"]
    assert s["beyond_noise"]["flagged_samples"] == 2
    assert "2 samples beyond this run's numerical noise (M3; " in s["bottom_line"]["text"]
    assert "first: step 1, sample 3): check their context, weights and sampling" in \
        s["bottom_line"]["text"]
    assert len(t) == 40 and t.flagged.sum() == 2 and t.tokens.sum() == 320


def test_docs_example_on_the_committed_fixture(committed, tmp_path):
    """docs/diagnose.md shows the section's lines of ``tailtheory diagnose`` on
    ``tests/diagnose/data/beyond_noise.jsonl``, which holds what
    :func:`~tests.diagnose.planted.beyond_noise_shifted` writes."""
    path = DATA / "beyond_noise.jsonl"
    assert same_records(path, COMMITTED["beyond_noise.jsonl"](tmp_path / "f.jsonl"))
    assert path.stat().st_size < 16000
    out = [f"[beyond_noise] {x}" for x in committed.verdicts["beyond_noise"]]
    assert _doc_block("<!-- output: the [beyond_noise] lines of tailtheory diagnose "
                      "tests/diagnose/data/beyond_noise.jsonl --out diag/ -->") == \
        ["$ tailtheory diagnose tests/diagnose/data/beyond_noise.jsonl --out diag/", *out]
