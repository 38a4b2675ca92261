"""Tests of ``tailtheory.pruning.trained_tails``: DVP's P4 measured on trained models (claim P4).

The real measurement (minutes) is stored in ``results/p4_trained.json``; here the formulas run on
small random inputs against their definitions, and the pipeline on a tiny random model.
"""

import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from provenance_check import check_named, tiny_model
from tailtheory.core.measurements import RESULTS_ENV, StaleMeasurement
from tailtheory.core.models import tiny_lm
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.experiments import presets
from tailtheory.pruning import matched_tails as mt
from tailtheory.pruning import trained_tails as tr
from tailtheory.pruning.trained_tails import (P_BIN_EDGES, TrainedP4Config, mass_shares,
                                              rollout_setting, sampled_mismatch, sampled_shares,
                                              share_summary)


def _pair(seed=0, B=3, T=5, V=40, scale=4.0, sigma=0.05):
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    return z, z + sigma * torch.randn(B, T, V, generator=g, dtype=torch.float64)


def _bin(p):
    return sum(p >= e for e in P_BIN_EDGES)


# --- P4: where the mismatch sits -------------------------------------------------------------

def test_mass_shares_equal_a_loop_over_the_definition():
    """P4: per-bin shares of q, q|Delta| and p phi(q/p) against a loop over every token."""
    z, zp = _pair()
    mask = torch.ones(z.shape[:2], dtype=torch.bool)
    mask[0, 3:] = False
    df = mass_shares(z, zp, mask)
    nb = len(P_BIN_EDGES) + 1
    tot = torch.zeros(3, nb, dtype=torch.float64)
    for b, t in mask.nonzero().tolist():
        p, q = torch.softmax(z[b, t], -1), torch.softmax(zp[b, t], -1)
        for j in range(z.shape[-1]):
            k = _bin(float(p[j]))
            D = math.log(q[j]) - math.log(p[j])
            tot[:, k] += torch.tensor([q[j], q[j] * abs(D), q[j] * D - q[j] + p[j]])
    assert list(df.columns) == ["p_lo", "p_hi", "mass_share", "abs_share", "kl_share"]
    for i, c in enumerate(("mass_share", "abs_share", "kl_share")):
        assert df[c].to_numpy() == pytest.approx((tot[i] / tot[i].sum()).numpy(), abs=1e-10)
        assert df[c].sum() == pytest.approx(1.0) and (df[c] >= 0).all()


def test_mass_share_kl_terms_sum_to_the_kl():
    """M4: the non-negative KL terms p phi(q/p) add up to KL(q || p) of every position."""
    z, zp = _pair(1, sigma=0.5)
    lp, lq = torch.log_softmax(z, -1), torch.log_softmax(zp, -1)
    sums = tr._share_rows(z.reshape(-1, z.shape[-1]), zp.reshape(-1, z.shape[-1]),
                          torch.tensor(P_BIN_EDGES, dtype=torch.float64))
    kl = (lq.exp() * (lq - lp)).sum(-1).reshape(-1)
    assert sums[:, 2].sum(-1) == pytest.approx(kl, rel=1e-10)
    assert (sums[:, 2] >= 0).all()


def test_mass_shares_proportional_when_delta_is_constant_in_p_and_nan_without_mismatch():
    z, _ = _pair(2)
    same = mass_shares(z, z)
    assert same.mass_share.sum() == pytest.approx(1.0) and same.abs_share.isna().all()
    with pytest.raises(ValueError, match="shape"):
        mass_shares(z, z[..., :-1])


def test_sampled_shares_and_summary():
    p = torch.tensor([0.95, 0.95, 0.3, 1e-5])
    d = torch.tensor([0.0, 0.0, 0.1, 0.3])
    df = sampled_shares(p, d)
    assert df.token_share.sum() == pytest.approx(1) and df.abs_share.sum() == pytest.approx(1)
    s = share_summary(df, mass="token_share")
    assert s["head_mass_share"] == 0.5 and s["head_abs_share"] == 0.0
    assert s["tail_mass_share"] == 0.25 and s["tail_abs_over_mass"] == pytest.approx(3.0)
    assert s["share_tv"] == pytest.approx(0.5)


# --- P4: sampled tokens of real rollouts ----------------------------------------------------

@pytest.fixture(scope="module")
def model():
    from tailtheory.mismatch.real import sharpen

    return sharpen(tiny_lm(vocab_size=64, hidden=32, layers=1, heads=2, kv_heads=1), 20.0)


CFG = TrainedP4Config(rhos=(1e-6, 1e-2), sample_seed=3)
PROMPTS = torch.randint(2, 64, (6, 4), generator=torch.Generator().manual_seed(0)).tolist()


@pytest.mark.usefixtures("one_thread")
def test_sampled_mismatch_against_the_engine_and_the_trainer(model):
    """P4 / V2: Delta of sampled tokens = rollout logp - trainer logp on the same S; the
    sequence log-ratio is -sum_t Delta_t (M6)."""
    from tailtheory.engine.policy_forward import response_logprobs

    rb, z = tr._rollout(model, PROMPTS, 1, 0, CFG, 1e-2, 8)
    out = sampled_mismatch(rb, z)
    with torch.no_grad():
        train = response_logprobs(model, rb, keep=rb.keep)
    D = (rb.logp - train).double() * rb.mask
    assert out["tokens"] == int(rb.mask.sum())
    assert out["tok_abs_mean"] == pytest.approx(float(D.abs().sum() / rb.mask.sum()), rel=1e-6)
    assert out["seq_q50"] == pytest.approx(float((-D.sum(-1)).median()), abs=float(
        (-D.sum(-1)).abs().max()))  # the median lies within the range
    assert out["seq_q01"] <= out["seq_q50"] <= out["seq_q99"]
    assert 0 <= out["tok_outlier_0.1"] <= out["tok_outlier_0.01"] <= 1
    assert out["mass_mean"] > 0 and out["kept_frac"] < 1


@pytest.mark.usefixtures("one_thread")
def test_exact_path_has_no_sampled_mismatch(model):
    """V1 through P4's pipeline: the exact rollout path gives Delta = 0 on every sampled token."""
    from dataclasses import replace

    rb, z = tr._rollout(model, PROMPTS, 1, 0, replace(CFG, path="exact"), 0.0, 8)
    out = sampled_mismatch(rb, z)
    assert out["tok_abs_mean"] == 0 and out["tok_abs_max"] == 0 and out["seq_abs_mean"] == 0


@pytest.mark.usefixtures("one_thread")
def test_rollout_setting_tables(model):
    s = rollout_setting(model, PROMPTS, 1, 0, 8, CFG)
    json.dumps(s)                                                # JSON-ready for results/
    sampled, sweep = pd.DataFrame(s["sampled"]), pd.DataFrame(s["sweep"])
    assert list(sampled.rho) == list(sweep.rho) == [0.0, *CFG.rhos]
    assert sweep.mass_mean.iloc[0] == 0 and sweep.mass_mean.is_monotonic_increasing
    assert pd.DataFrame(s["shares"]).mass_share.sum() == pytest.approx(1)
    assert pd.DataFrame(s["sampled_shares"]).token_share.sum() == pytest.approx(1)


# --- the stored measurement and the knees ----------------------------------------------------

def fake_trained_data(kl_left=(1.0, 0.3), mass=(0.0, 1e-4)):
    sweep = [{"rho": r, "mass_mean": m, "seq_kl": 0.01 * k, "abs_delta_mean": 0.01 * k,
              "abs_delta_max": 0.1 * k} for r, m, k in zip((0.0, 1e-4), mass, kl_left)]
    sampled = [{"rho": r, "tok_abs_mean": 0.01 * k, "tok_outlier_0.01": 0.1 * k,
                "tok_outlier_0.03": 0.01 * k, "tok_outlier_0.1": 0.0, "seq_abs_mean": k}
               for r, k in zip((0.0, 1e-4), kl_left)]
    shares = mass_shares(*_pair()).to_dict("records")
    sshares = sampled_shares(torch.tensor([0.5, 1e-4]), torch.tensor([0.1, 0.2]))
    roll = {"sweep": sweep, "sampled": sampled, "shares": shares,
            "sampled_shares": sshares.to_dict("records")}
    return {"settings": {"corpus_text": {"sweep": sweep, "shares": shares},
                         "corpus_rollout": roll, "policy_rollout": roll}}


def test_trained_knees_read_the_sweep_and_the_sampled_table():
    k = tr.trained_knees(fake_trained_data(), 1e-3)
    assert set(k) == set(tr.TRAINED_SETTINGS)
    assert k["corpus_text"]["seq_kl_left"] == pytest.approx(0.3)
    assert "tok_abs_mean_left" not in k["corpus_text"]
    assert k["policy_rollout"]["tok_abs_mean_left"] == pytest.approx(0.3)
    assert k["policy_rollout"]["tok_outlier_left"] == pytest.approx(0.3)
    expensive = tr.trained_knees(fake_trained_data(mass=(0.0, 0.1)), 1e-3)
    assert expensive["corpus_rollout"]["seq_kl_left"] == 1.0
    assert expensive["corpus_rollout"]["rho"] == 0


def fake_matched_data(kl_left=(1.0, 0.3)):
    roll = fake_trained_data(kl_left)["settings"]["policy_rollout"]
    return {"settings": {name: roll for name in mt.MATCHED_SETTINGS}}


def test_p4_verdict_needs_the_knee_on_every_trained_model(monkeypatch):
    """P4: TOY-SCALE only when every trained setting shows the knee; each is reported. The
    claim's verdict is the matched recipe's policies', today's testbed's beside it."""
    from tailtheory.core.registry import Verdict
    from tailtheory.pruning import claims

    monkeypatch.setattr(tr, "p4_trained_data", lambda profile: fake_trained_data())
    monkeypatch.setattr(mt, "p4_matched_data", lambda profile: fake_matched_data())
    ev = claims._p4("quick")
    assert ev.verdict == Verdict.TOY_SCALE and ev.numbers["matched_mid/knee"] == "yes"
    assert ev.numbers["measured on"].startswith("matched recipe")
    assert ev.numbers["corpus LM and kk_trace policy: verdict"] == "TOY-SCALE"
    today = claims._p4_settings(fake_trained_data(), tr.TRAINED_SETTINGS)
    assert today.numbers["policy_rollout/knee"] == "yes"
    data = fake_trained_data()
    data["settings"]["corpus_text"] = fake_trained_data(kl_left=(1.0, 0.9))["settings"]["corpus_text"]
    monkeypatch.setattr(tr, "p4_trained_data", lambda profile: data)
    ev = claims._p4("quick")                     # today's testbed changes, the verdict does not
    assert ev.verdict == Verdict.TOY_SCALE
    assert ev.numbers["corpus LM and kk_trace policy: verdict"] == "NOT-REPRODUCED"
    assert claims._p4_settings(data, tr.TRAINED_SETTINGS).numbers["corpus_text/knee"] == "no"
    matched = fake_matched_data()
    matched["settings"]["matched_warm"] = fake_matched_data((1.0, 0.9))["settings"]["matched_warm"]
    monkeypatch.setattr(mt, "p4_matched_data", lambda profile: matched)
    ev = claims._p4("quick")
    assert ev.verdict == Verdict.NOT_REPRODUCED and ev.numbers["matched_warm/knee"] == "no"
    assert ev.numbers["matched_mid/knee"] == "yes"


@pytest.mark.parametrize("module, name, measure, command", [
    (tr, "p4_trained", "measure_p4_trained", "P4_TRAINED_COMMAND"),
    (mt, "p4_matched", "measure_matched", "P4_MATCHED_COMMAND")])
def test_stored_measurement_quick_reads_thorough_writes(tmp_path, monkeypatch, module, name,
                                                        measure, command):
    data = getattr(module, f"{name}_data")
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    with pytest.raises(StaleMeasurement, match=name):
        data("quick")
    monkeypatch.setattr(module, measure, lambda cfg: {"settings": {}, "x": 1})
    assert data("thorough")["x"] == 1
    assert data("quick")["x"] == 1
    rec = json.loads((tmp_path / f"{name}.json").read_text())
    assert rec["command"] == getattr(module, command)
    with pytest.raises(StaleMeasurement, match="another config"):
        data("quick", TrainedP4Config(policy_prompts=8))



@pytest.mark.parametrize("kw, match", [
    (dict(path="int8"), "path"), (dict(rule="nucleus"), "rule"), (dict(rhos=()), "rhos"),
    (dict(rhos=(1e-2, 1e-4)), "rhos"), (dict(rhos=(0.0,)), "rhos"), (dict(taus=(0.0,)), "taus"),
    (dict(text_len=0), "text_len"), (dict(policy_prompts=1.5), "policy_prompts")])
def test_config_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainedP4Config(**kw)


def test_identity_is_json_and_sensitive():
    a = tr.p4_trained_identity()
    assert json.loads(json.dumps(a)) == a
    assert a != tr.p4_trained_identity(TrainedP4Config(path="fp16"))


NO_PROMPTS = SimpleNamespace(problems=lambda n, seed: [], stop_ids=[1], pad_id=0,
                             max_response_len=4)
"""A task whose prompts are none (the rollouts are stubbed where it is used)."""


def test_each_setting_names_its_model(monkeypatch, tmp_path):
    """The corpus LM's settings name the corpus LM, the policy's the warm start, each with the
    machine (the rollouts stubbed, the exact sweep on small random logits)."""
    corpus, policy = tiny_model(2), tiny_model(3)
    monkeypatch.setattr(tr, "corpus_lm", lambda cfg: tmp_path)
    monkeypatch.setattr(tr, "load_corpus_lm", lambda path, device=None: (
        corpus, SimpleNamespace(convert_tokens_to_ids=lambda toks: [1, 2])))
    monkeypatch.setattr(tr, "heldout_batch", lambda path, B, L, seed=0: torch.zeros(1, 1))
    monkeypatch.setattr(tr, "paired_logits", lambda model, ids, path: _pair())
    monkeypatch.setattr(tr, "rollout_setting", lambda *a: {"sweep": []})
    monkeypatch.setattr(tr, "read_corpus_record", lambda path: {
        "hash": "h", "heldout_loss": 4.0, "heldout_ppl": 54.6, "unigram_loss": 6.0,
        "n_params": 1, "corpus": {}})
    monkeypatch.setattr(presets, "warm_model", lambda preset, progress=True: tmp_path)
    monkeypatch.setattr(tr, "load_warm_start", lambda path, device=None: (policy, NO_PROMPTS))
    monkeypatch.setattr(tr, "read_record", lambda path: {
        "hash": "w", "config": {"task": "kk_trace"}, "accuracy": 0.4, "steps": 1, "n_params": 1})
    data = tr.measure_p4_trained(TrainedP4Config(rhos=(1e-2,)))
    settings = data["settings"]
    for name in ("corpus_text", "corpus_rollout"):
        check_named(settings[name], weights_fingerprint(corpus), machine())
    check_named(settings["policy_rollout"], weights_fingerprint(policy), machine())
