"""Decisiveness with its noise shown (``tailtheory/lopti/decisive/noise.py``): on synthetic
branch outcomes of known effect, the excess mean D and the debiased RMS find the signal under the
noise; the prompt-clustered interval, the three-way calls and the reporting floor."""

from __future__ import annotations

import numpy as np
import pytest

from tailtheory.lopti.decisive import noise as dn
from tests.lopti.decisive.test_report import _data

K = 64
"""Continuations a branch, as calibrated."""


def _branches(q_with, q_without, K=K, seed=0):
    """Bernoulli rewards ``(n, K)`` of two independent branches of means ``q_*`` ``(n,)``."""
    rng = np.random.default_rng(seed)
    n = len(q_with)
    return ((rng.random((n, K)) < np.asarray(q_with)[:, None]).astype(float),
            (rng.random((n, K)) < np.asarray(q_without)[:, None]).astype(float))


def _d(rw, ro, p):
    return (1 - p) * np.abs(rw.mean(1) - ro.mean(1)), dn.d_se(rw, ro, p)


def test_d_se_is_the_paired_standard_error():
    rw = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    ro = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    se = dn.d_se(rw, ro, np.array([0.2, 0.5]))
    assert se[0] == pytest.approx(0.8 * np.std([1, 0, 0, 1], ddof=1) / 2) and se[1] == 0.0
    with pytest.raises(ValueError, match=r"\(n, K\) with K >= 2"):
        dn.d_se(rw[:, :1], ro[:, :1], np.array([0.2, 0.5]))


def test_tokens_of_no_effect_have_no_excess_d_though_their_mean_d_is_large():
    n, p = 4000, np.full(4000, 0.1)
    D, se = _d(*_branches(np.full(n, 0.5), np.full(n, 0.5)), p)
    assert D.mean() > 0.05                                   # the noise floor: near tau
    assert abs(dn.excess_mean_d(D, se)) < 0.05 * D.mean()
    assert dn.debiased_rms(D, se) < 0.2 * np.sqrt(np.mean(D**2))
    # about a tenth of free tokens reach the 90th percentile; the 2-se rule calls none decisive
    tau = np.quantile(D, 0.9)
    assert (dn.three_way(D, se, tau) == "decisive").mean() < 0.005


def test_a_known_effect_is_found_under_the_noise():
    n, p = 4000, np.full(4000, 0.2)
    gap = np.where(np.arange(n) % 4 == 0, 0.4, 0.0)          # a quarter decide: gap 0.4
    D, se = _d(*_branches(0.3 + gap, np.full(n, 0.3)), p)
    true = (1 - p) * gap
    assert dn.debiased_rms(D, se) == pytest.approx(np.sqrt(np.mean(true**2)), rel=0.05)
    # the excess is a lower estimate of the mean effect: noise of the decisive tokens is removed
    assert 0.8 * true.mean() < dn.excess_mean_d(D, se) < 1.05 * true.mean()


def test_prompt_clustered_interval_is_wider_than_the_token_one_when_prompts_differ():
    rng = np.random.default_rng(3)
    prompts = np.repeat(np.arange(40), 10)
    x = rng.normal(0, 1, 40)[prompts] + rng.normal(0, 0.1, 400)   # a prompt's tokens agree
    est, lo, hi = dn.cluster_bootstrap(np.mean, prompts, x, n_boot=500, seed=1)
    _, lo_t, hi_t = dn.cluster_bootstrap(np.mean, np.arange(400), x, n_boot=500, seed=1)
    assert lo < est < hi and hi - lo > 2 * (hi_t - lo_t)
    assert dn.cluster_bootstrap(np.mean, prompts, x, n_boot=500, seed=1) == (est, lo, hi)
    with pytest.raises(ValueError, match="one value per token"):
        dn.cluster_bootstrap(np.mean, prompts[:5], x)


def test_three_way_calls_and_their_tally_by_role():
    D = np.array([0.30, 0.05, 0.10, 0.20, 0.081])
    se = np.array([0.10, 0.01, 0.01, 0.06, 0.0])
    calls = dn.three_way(D, se, 0.081)
    assert calls.tolist() == ["decisive", "free", "undetermined", "undetermined", "decisive"]
    tally = dn.calls_by_role(D, se, ["fork", "synonym", "fork", "fork", None], 0.081)
    assert tally["fork"] == {"decisive": 1, "free": 0, "undetermined": 2}
    assert tally["synonym"]["free"] == 1 and tally["all"]["decisive"] == 1


def test_a_share_below_the_floor_is_not_reported():
    few = dn.share_report(np.ones(199, bool), np.arange(199) % 50)
    assert not few["reportable"] and few["note"].startswith("not reportable: 199 tokens of 50")
    narrow = dn.share_report(np.ones(200, bool), np.arange(200) % 39)
    assert not narrow["reportable"] and narrow["prompts"] == 39
    ok = dn.share_report(np.arange(200) % 4 == 0, np.arange(200) % 40, n_boot=200)
    assert ok["reportable"] and ok["share"] == 0.25 and ok["low"] < 0.25 < ok["high"]


def test_noise_summary_of_a_measurement_and_the_se_before_and_after():
    s = dn.noise_summary(_data(), tau=0.1, group_size=8, n_boot=50)
    assert (s["tokens"], s["prompts"]) == (4, 1)
    assert s["share"]["note"] == "not reportable: 4 tokens of 1 prompts (floor: 200 tokens of " \
                                 "40 prompts)"
    assert s["calls"]["fork"] == {"decisive": 2, "free": 0, "undetermined": 0}
    assert s["D_mean"] == pytest.approx(0.1275) and s["noise_mean"] == pytest.approx(
        dn.HALF_NORMAL * 0.01)
    before = [{"role": "synonym", "D_se": x} for x in (0.04, 0.06, 0.08)]
    after = [{"role": "order", "D_se": x} for x in (0.01, 0.02, 0.03)] + [
        {"role": "fork", "D_se": 1.0}]
    cmp = dn.se_before_after(before, after)
    assert cmp["before"]["median"] == 0.06 and cmp["after"]["n"] == 3
    assert cmp["median_ratio"] == pytest.approx(1 / 3)


def test_plot_excess_shows_each_policy_with_its_interval_and_calls():
    import matplotlib

    matplotlib.use("Agg")
    s = dn.noise_summary(_data(), tau=0.1, group_size=8, n_boot=200)
    fig, df = dn.plot_excess({"a": s, "b": s}, reference=0.05)
    assert list(df["policy"]) == ["a", "b"] and (df["low"] <= df["excess_D"]).all()
    assert df[list(dn.CALLS)].sum(axis=1).tolist() == [s["tokens"]] * 2
    assert len(fig.axes) == 2 and "not reportable" in df["share"].iloc[0]
