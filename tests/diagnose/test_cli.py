"""``tailtheory diagnose`` (``tailtheory.diagnose.cli``) on real and generic dumps, end to end:
its numbers against the toolkit's own functions applied directly to the whole data (M3-M6, T12,
P2/P4), streaming against at-once."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tailtheory.cli import main
from tailtheory.diagnose.build import SUMMARY_KEYS
from tailtheory.diagnose.cli import diagnose_dumps, run_diagnose
from tailtheory.mismatch.accumulation import (TAIL_P, accumulation_regression,
                                              sequence_log_ratio, simulate_sequences)
from tailtheory.core.estimators import k1, k3
from tailtheory.core.safeset import safe_vocab_mask
from tailtheory.pruning.vocab import pruned_mass
from tailtheory.trm.mask import trm_mask

from .conftest import engine_frame, logit_tokens, summaries_close, write_jsonl


def _padded(df: pd.DataFrame, col: str):
    """``(B, T)`` tensor of ``col`` and its mask, one row per (step, seq) of an engine dump."""
    keys = np.array(df.groupby(["step", "seq"]).ngroup())
    T = int(df.t.max()) + 1
    x = torch.zeros(keys.max() + 1, T, dtype=torch.float64)
    m = torch.zeros(keys.max() + 1, T, dtype=torch.bool)
    t = np.array(df.t)
    x[keys, t] = torch.tensor(df[col].to_numpy().copy())
    m[keys, t] = True
    return x, m


def test_engine_run_report_and_numbers(engine_run, tmp_path):
    """M3-M5, T12, TIM's k1/k3 of a real bf16 run: the summary equals the toolkit's functions on
    the concatenated dump, and the report, figures and CSVs exist."""
    out = tmp_path / "diag"
    assert main(["diagnose", str(engine_run), "--out", str(out), "--quiet",
                 "--trm-delta-max", "1e-7"]) == 0
    for name in ("report.html", "summary.json", "envelope.png", "envelope.csv",
                 "tail_bias.png", "trm.png", "trm.csv", "steps.png", "steps.csv"):
        assert (out / name).is_file(), name
    s = json.loads((out / "summary.json").read_text())
    assert set(s) == set(SUMMARY_KEYS)
    df = engine_frame(engine_run)
    log_rho = torch.tensor(df.log_rho.to_numpy().copy())
    Delta = -log_rho.numpy()
    assert np.abs(Delta).max() > 0                                    # a real mismatch
    assert s["tokens"] == len(df) and s["steps"] == 3 and s["files"] == 3
    assert s["sequences"] == df.groupby(["step", "seq"]).ngroups
    assert s["k1"] == pytest.approx(float(k1(log_rho).mean()), rel=1e-9)
    assert s["k3"] == pytest.approx(float(k3(log_rho).mean()), rel=1e-9)
    assert s["abs_delta_mean"] == pytest.approx(np.abs(Delta).mean(), rel=1e-9)
    assert s["abs_delta_max"] == pytest.approx(np.abs(Delta).max(), rel=1e-12)
    tail = df.p_old.to_numpy() < TAIL_P                                # recompute: p_old = p_train
    assert s["tail_tokens"] == tail.sum()
    assert s["tail_bias"] == pytest.approx(Delta[tail].mean(), rel=1e-9)
    x, m = _padded(df, "log_rho")
    for key, crit, kw in (("trm_accept_rate", "max", dict(delta_max=1e-7)),
                          ("trm_accept_rate_avg", "avg", dict(delta_avg=0.01))):
        want = trm_mask(m, crit, log_ratio=x, **kw).double().mean().item()
        assert s[key] == pytest.approx(want, abs=1e-12), key
    assert 0 < s["trm_accept_rate"] < 1                                # the threshold bites
    html = (out / "report.html").read_text()
    assert "M6" in html and "needs the top-k" in html and 'src="envelope.png"' in html


def test_streaming_equals_at_once(engine_run, tmp_path):
    """Row groups of 7 read 5 rows at a time give the summary of reading each file at once."""
    small = tmp_path / "small"
    small.mkdir()
    for f in sorted((engine_run / "tokens").glob("step_*.parquet")):
        pq.write_table(pq.read_table(f), small / f.name, row_group_size=7)
    assert pq.ParquetFile(next(small.iterdir())).num_row_groups > 1
    at_once = diagnose_dumps([engine_run], batch_rows=10 ** 6)
    streamed = diagnose_dumps([small], batch_rows=5)
    summaries_close(at_once.summary, streamed.summary)
    pd.testing.assert_frame_equal(at_once.tables["envelope"], streamed.tables["envelope"],
                                  rtol=1e-9)


def test_generic_m6_matches_regression(tmp_path):
    """M6 on simulated sequences: diagnose's regression of a JSONL (one row per response) dump
    equals ``accumulation_regression`` on the simulation; a parquet token-row dump of the same
    data gives the same summary."""
    sim = simulate_sequences(B=120, T_max=32, V=16, sigma=0.3, seed=1)
    D, p, mask = sim["Delta_tok"], sim["p_tok"], sim["mask"]
    seqs, toks = [], []
    for b in range(D.shape[0]):
        n = int(mask[b].sum())
        lp = torch.log(p[b, :n])
        seqs.append(dict(sample_id=f"r{b}", token_id=[0] * n, logp_train=lp.tolist(),
                         logp_rollout=(lp + D[b, :n]).tolist(), reward=1.0))
        toks += [dict(sample_id=f"r{b}", position=t, token_id=0, logp_train=float(lp[t]),
                      logp_rollout=float(lp[t] + D[b, t])) for t in range(n)]
    a = diagnose_dumps([write_jsonl(tmp_path / "seq.jsonl", seqs)], batch_rows=7)
    pq.write_table(pa.Table.from_pylist(toks), tmp_path / "tok.parquet", row_group_size=100)
    b = diagnose_dumps([tmp_path / "tok.parquet"], batch_rows=33)
    want = accumulation_regression(sequence_log_ratio(D, mask), sim["n_tail"].double(),
                                   sim["T"].double())
    got = a.summary["m6"]
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-6, abs=1e-12), k
    summaries_close(a.summary, b.summary, rel=1e-9)
    assert a.summary["tail_head_ratio"] > 1                           # a real head and tail


@pytest.mark.parametrize("k", [None, 6])
def test_dvp_matches_full_logits(tmp_path, k, monkeypatch):
    """P2/P4: with full lists, the share of sampled tokens outside DVP's min-p set and the
    pruned mass equal ``safe_vocab_mask`` / ``pruned_mass`` on the logits; with top-6 lists the
    token share is still exact and the mass an upper bound. Batches shrink with the lists."""
    from tailtheory.diagnose import read

    monkeypatch.setattr(read, "TOPK_VALUES", 64)                       # 2 or 10 rows a batch
    recs, z, z_roll, y = logit_tokens(k=k)
    rhos = (1e-3, 1e-2, 1e-1)
    d = run_diagnose([write_jsonl(tmp_path / "t.jsonl", recs)], tmp_path / "o", rhos=rhos,
                     batch_rows=50)
    tbl = d.tables["dvp"]
    for r, rho in enumerate(rhos):
        keep = safe_vocab_mask(z_roll, "min_p", rho)
        out = ~keep.gather(-1, y[..., None])[..., 0]
        mass, mass_t = pruned_mass(z_roll, keep), pruned_mass(z, keep)
        assert tbl.pruned_token_frac[r] == pytest.approx(out.double().mean().item(), abs=1e-12)
        if k is None:
            assert tbl.mean_pruned_mass[r] == pytest.approx(mass.mean().item(), rel=1e-9)
            assert tbl.mean_pruned_mass_train[r] == pytest.approx(mass_t.mean().item(), rel=1e-9)
            assert tbl.exact_frac[r] == 1.0
        else:
            assert tbl.mean_pruned_mass[r] >= mass.mean().item() * (1 - 1e-9)
    assert tbl.pruned_token_frac.iloc[-1] > 0                          # rho = 0.1 bites
    assert (tmp_path / "o" / "dvp.png").is_file()


@pytest.mark.slow
def test_twenty_step_engine_run(tmp_path):
    """A 20-step bf16 run of the tiny model through ``tailtheory diagnose``: every step read."""
    from tailtheory.engine.config import TrainConfig
    from tailtheory.engine.trainer import train

    run = tmp_path / "run"
    train(TrainConfig(model="tiny", task="kk", steps=20, rollout="bf16", dump_tokens=True,
                      eval_every=0, threads=1, out=str(run)), progress=False)
    assert main(["diagnose", str(run), "--out", str(tmp_path / "d"), "--quiet"]) == 0
    s = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert s["steps"] == 20 and s["tokens"] == len(engine_frame(run))
