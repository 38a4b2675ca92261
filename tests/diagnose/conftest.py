"""Dumps for the diagnose tests: a real engine run, and generic dumps built from known logits."""

import json

import numpy as np
import pandas as pd
import pytest
import torch


@pytest.fixture(scope="session")
def engine_run(tmp_path_factory):
    """A real 3-step GRPO run of the untrained tiny model with a bf16 rollout, ``--dump-tokens``:
    Delta is real arithmetic, not injected."""
    from tailtheory.engine.config import TrainConfig
    from tailtheory.engine.trainer import train

    out = tmp_path_factory.mktemp("diagnose") / "run"
    cfg = TrainConfig(model="tiny", task="kk", n_people=2, steps=3, prompts_per_step=4,
                      group_size=4, rollout="bf16", dump_tokens=True, eval_every=0, threads=1,
                      out=str(out))
    before = torch.get_num_threads()
    try:
        train(cfg, progress=False)
    finally:
        torch.set_num_threads(before)
    return out


def engine_frame(run) -> pd.DataFrame:
    """The run's dump files, concatenated (the test's independent view of the data)."""
    return pd.concat([pd.read_parquet(f) for f in sorted((run / "tokens").glob("step_*.parquet"))],
                     ignore_index=True)


def logit_tokens(B=40, T=12, V=32, sigma=0.3, seed=0, k=None, temp_roll=1.0):
    """Token rows sampled from ``softmax((z + delta) / temp_roll)`` with trainer logits ``z``
    that have a head (one token 4 above the rest in half the positions). Returns ``(records, z,
    z_roll, y)``; records carry ``topk_logp_rollout`` / ``topk_logp_train`` over the sampler's
    ``k`` most likely tokens (all ``V`` when ``k`` is None), in the sampler's order; the
    sampler's log-probs are at ``temp_roll`` (``z_roll`` is returned before the division)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    z[..., 0] += 6.0 * (torch.rand(B, T, generator=g) < 0.5)
    z_roll = z + sigma * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z_roll / temp_roll, -1).reshape(-1, V), 1,
                          generator=g).reshape(B, T)
    lp, lp_roll = torch.log_softmax(z, -1), torch.log_softmax(z_roll / temp_roll, -1)
    order = torch.argsort(lp_roll, -1, descending=True)[..., : (k or V)]
    recs = []
    for b in range(B):
        for t in range(T):
            recs.append(dict(sample_id=b, position=t, token_id=int(y[b, t]), step=b % 3,
                             logp_train=float(lp[b, t, y[b, t]]),
                             logp_rollout=float(lp_roll[b, t, y[b, t]]),
                             advantage=float(b % 2 - 0.5), reward=float(b % 2),
                             topk_logp_rollout=lp_roll[b, t, order[b, t]].tolist(),
                             topk_logp_train=lp[b, t, order[b, t]].tolist()))
    return recs, z, z_roll, y


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def summaries_close(a: dict, b: dict, rel=1e-9, inputs=("file", "precision")) -> None:
    """Two summaries agree: counts exactly, floats to ``rel``, nested dicts / lists alike; the
    keys ``inputs`` name the files read and how they store their numbers, not the numbers, and
    are not compared."""
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if k in inputs:
            continue
        if isinstance(x, dict):
            summaries_close(x, y, rel, inputs)
        elif isinstance(x, list):
            assert len(x) == len(y), k
            for u, v in zip(x, y):
                summaries_close(u, v, rel, inputs) if isinstance(u, dict) else \
                    summaries_close({k: u}, {k: v}, rel, inputs)
        elif isinstance(x, float) and x is not None and y is not None:
            assert np.isclose(x, y, rtol=rel, atol=1e-15, equal_nan=True), (k, x, y)
        else:
            assert x == y, (k, x, y)
