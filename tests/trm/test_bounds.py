"""TRM (T1-T13): exact errors of tabular pairs against every trust-region bound (the exact
quantities themselves, T9's identity among them, are ``test_exact.py``), the T11
counterexample, the T12 masks and the T13 growth fit."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, target
from hypothesis import strategies as st

from strategies import tabular_policies
from tailtheory.trm import experiments as tx
from tailtheory.trm import mask as tm
from tailtheory.trm import bounds as tr
from tailtheory.core.estimators import k3
from tailtheory.core.tabular import TabularPolicy, random_rewards
from tailtheory.trm.exact import context_kl, k3_expectation, worst_case_reward
from tests.trm.test_exact import pairs

FULL_KEYS = list(tr.BOUND_KEYS)

WITNESS_CLASSICAL = tx.T10_WITNESSES["classical"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _pair_from(x):
    return tx.witness_pair(x)


# -- T1-T8, T10: every bound holds on exact errors ----------------------------------------------
@given(pairs(), st.booleans())
@example(_pair_from(WITNESS_CLASSICAL), True)
@example(tx.make_pair(2, 12, None, 1.0, 0.5, 1.0, seed=3), True)
@example(tx.make_pair(3, 5, 0, 10.0, 8.0, 0.02, seed=1), True)
def test_T1_to_T8_and_T10_bounds_hold_on_tabular_pairs(pair, worst):
    """T1-T8 and the halved T10: bound >= |Error| for the worst-case or a random reward, dense and
    sparse pairs up to T = 12; the ratio |Error| / halved bound is driven up by ``target``."""
    roll, theta = pair
    R = worst_case_reward(roll, theta) if worst else random_rewards(roll, seed=1)
    row = tx.pair_record(roll, theta, R)
    tol = row["num_tol"]
    for k in FULL_KEYS:
        assert row[f"bound/{k}"] >= row["abs_error"] - tol, (k, row)
        assert row[f"half/{k}"] >= row["abs_error"] - tol, ("T10 refuted", k, row)
    if row["half/unified"] > tx.RATIO_FLOOR:
        target(row["abs_error"] / row["half/unified"], label="T8/T10 tightness")


@pytest.mark.parametrize("key, others", [("classical", ("coupling",)), ("adaptive", ()),
                                         ("pm_tv", ())])
def test_T10_halved_bound_attained_by_pinned_witness(key, others):
    """T10 is tight: pinned pairs reach |Error| ~ halved T1 (= halved T6 there), halved T7 and
    halved T3; any bound smaller than half the stated ones would fail here."""
    for k in (key, *others):
        ratio = tx.witness_ratio(key, k)  # the T10 check's measurement
        assert 0.98 < ratio <= 1 + 1e-9, (k, ratio)


@pytest.mark.slow
def test_T10_optimiser_reaches_halved_bounds():
    """T10 tightness by optimisation: Nelder-Mead drives |Error| / halved T7 to ~1, not beyond."""
    from scipy.optimize import minimize

    def neg_ratio(x):
        row = tx.pair_record(*_pair_from(x))
        b = row["half/adaptive"]
        return -row["abs_error"] / b if b > tx.RATIO_FLOOR else 0.0

    x0 = np.random.default_rng(0).normal(size=12) * 1.5
    best = -minimize(neg_ratio, x0, method="Nelder-Mead", options=dict(maxiter=2000)).fun
    assert 0.99 < best <= 1 + 1e-9


def test_T1_classical_formula_and_metamorphic():
    """T1: 2T(T-1)eps^2; zero at T = 1 and at eps = 0; increasing in T and eps."""
    assert tr.classical_bound(5, 0.1) == pytest.approx(2 * 5 * 4 * 0.01)
    assert tr.classical_bound(1, 0.7) == 0 and tr.classical_bound(9, 0.0) == 0
    assert tr.classical_bound(6, 0.2) < tr.classical_bound(7, 0.2) < tr.classical_bound(7, 0.3)


def test_T2_pm_kl_three_halves_asymptotics():
    """T2: (4/3) T^{3/2} delta when the caps are inactive (ratio -> 1 for large T, tiny delta)."""
    T, delta = 10_000, 1e-9
    assert tr.pm_kl_bound(T, delta) / (4 / 3 * T**1.5 * delta) == pytest.approx(1, rel=1e-3)
    assert tr.pm_kl_bound(1, 5.0) == 0 and tr.pm_kl_bound(4, 0.0) == 0
    assert tr.pm_kl_bound(50, 10.0) == pytest.approx(4 * 49)            # every cap active


def test_T3_pm_tv_below_pm_kl_under_pinsker():
    """T3 <= T2 whenever eps <= sqrt(delta/2) (Pinsker), equal at the default eps."""
    for T, d in itertools.product([1, 3, 40], [1e-4, 0.3, 5.0]):
        e = min(1.0, math.sqrt(d / 2))
        assert tr.pm_tv_bound(T, d, e) == pytest.approx(tr.pm_kl_bound(T, d))
        assert tr.pm_tv_bound(T, d, 0.5 * e) <= tr.pm_kl_bound(T, d)


def test_T4_mix_kl_approximation_and_zero():
    """T4: 2 T sqrt(delta D^seq_KL) with caps inactive; zero when D^seq_KL = 0."""
    assert tr.mix_kl_bound(20, 0.01, 0.05) == pytest.approx(2 * 20 * math.sqrt(0.01 * 0.05))
    assert tr.mix_kl_bound(20, 0.01, 0.0) == 0


def test_T5_mix_tv_monotone_and_capped():
    """T5: 4 T min(1, eps) min(1, D^seq_TV), increasing in D^seq_TV, zero at zero."""
    assert tr.mix_tv_bound(10, 0.2, 0.0) == 0
    assert tr.mix_tv_bound(10, 0.2, 0.1) < tr.mix_tv_bound(10, 0.2, 0.3)
    assert tr.mix_tv_bound(10, 1.0, 1.0) == 40


def test_T6_coupling_equals_classical_until_the_cap():
    """T6: with (T-1) eps <= 1 the coupling bound is exactly the classical 2T(T-1)eps^2."""
    for T, e in [(2, 0.5), (5, 0.2), (11, 0.1)]:
        assert tr.coupling_bound(T, e) == pytest.approx(tr.classical_bound(T, e))
    assert tr.coupling_bound(100, 0.1) < tr.classical_bound(100, 0.1)


def test_T7_adaptive_linear_in_mean_tv():
    """T7: zero for zero Dbar_t, linear in Dbar_t, the last step (T - t = 0) weighs nothing."""
    T = 6
    m = torch.full((T,), 0.05, dtype=torch.float64)
    b = tr.adaptive_bound(T, 0.02, 0.1, m)
    assert tr.adaptive_bound(T, 0.02, 0.1, torch.zeros(T)) == 0
    assert tr.adaptive_bound(T, 0.02, 0.1, 2 * m) == pytest.approx(2 * b)
    last = torch.zeros(T, dtype=torch.float64)
    last[-1] = 0.9
    assert tr.adaptive_bound(T, 0.02, 0.1, last) == 0


def test_T8_unified_is_min_and_missing_inputs_drop_keys():
    """T8: the minimum of the T2-T7 bounds present; absent inputs remove their keys; halved = /2."""
    full = tr.trust_region_bounds(8, 0.05, 0.1, seq_kl=0.2, seq_tv=0.15, mean_tv=torch.full((8,),
                                                                                            0.02))
    assert list(full) == list(tr.BOUND_KEYS)
    assert full["unified"] == min(full[k] for k in tr.UNIFIED_OF)
    assert tr.unified_bound(8, 0.05, 0.1, 0.2, 0.15, torch.full((8,), 0.02)) == full["unified"]
    half = tr.trust_region_bounds(8, 0.05, 0.1, seq_kl=0.2, seq_tv=0.15,
                                  mean_tv=torch.full((8,), 0.02), halved=True)
    assert all(half[k] == pytest.approx(full[k] / 2) for k in full)
    few = tr.trust_region_bounds(8, 0.05)
    assert set(few) == {"classical", "pm_kl", "pm_tv", "coupling", "unified"}
    assert few["pm_tv"] == pytest.approx(few["pm_kl"])                  # eps = sqrt(delta/2)
    seq = tr.trust_region_bounds(8, 0.05, seq_kl=0.2)
    assert seq["mix_tv"] == pytest.approx(tr.mix_tv_bound(8, math.sqrt(0.025), math.sqrt(0.1)))


@pytest.mark.parametrize("kwargs, match", [
    (dict(T=0, delta=0.1), "T"), (dict(T=3, delta=-0.1), "delta"),
    (dict(T=3, delta=float("nan")), "delta"), (dict(T=3, delta=0.1, eps=1.5), "eps"),
    (dict(T=3, delta=0.1, eps=-0.1), "eps"), (dict(T=3, delta=0.1, seq_kl=0.5), "seq_kl"),
    (dict(T=3, delta=0.1, seq_tv=1.2), "seq_tv"), (dict(T=3, delta=0.1, seq_kl=float("nan")),
                                                   "seq_kl"),
    (dict(T=3, delta=0.1, mean_tv=torch.zeros(4)), "mean_tv"),
    (dict(T=3, delta=0.1, mean_tv=torch.tensor([0.1, -0.1, 0.0])), "mean_tv"),
    (dict(T=3, delta=0.1, mean_tv=torch.tensor([0.1, 1.5, 0.0])), "mean_tv"),
    (dict(T=2.5, delta=0.1), "T"), (dict(T=3, delta=torch.ones(2)), "delta"),
])
def test_bounds_reject_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tr.trust_region_bounds(**kwargs)


def test_tightest_bound_needs_a_t2_to_t7_key():
    assert tr.tightest_bound({"pm_kl": 2.0, "coupling": 1.0, "classical": 0.1}) == "coupling"
    with pytest.raises(ValueError, match="none of"):
        tr.tightest_bound({"classical": 1.0})


# -- zero at zero --------------------------------------------------------------------------------
def test_identical_policies_have_zero_error_and_divergence():
    """Zero at zero: pi_theta = pi_roll gives Error = 0, delta = eps = 0, every bound 0."""
    roll = TabularPolicy.random(3, 4, eos=2, seed=0)
    row = tx.pair_record(roll, roll.with_logits(roll.logits + 3.0))     # shift-invariant logits
    assert row["abs_error"] < 1e-15 and row["delta"] < 1e-15 and row["eps"] < 1e-15
    assert all(row[f"bound/{k}"] < 1e-12 for k in FULL_KEYS)


# -- T11 ----------------------------------------------------------------------------------------
def test_T11_rare_context_keeps_delta_while_seq_kl_vanishes():
    """T11: delta = 1 for every member while D^seq_KL = p -> 0: no f(D^seq_KL) bounds delta."""
    fam = tx.t11_family([1e-1, 1e-4, 1e-8, 1e-12])
    assert np.allclose(fam["delta"], 1.0, atol=1e-12)
    assert np.allclose(fam["seq_kl"], fam["p_rare"], rtol=1e-9)
    with pytest.raises(ValueError, match="p_rare"):
        tx.rare_context_pair(1.0)


# -- T13 ----------------------------------------------------------------------------------------
def test_T13_growth_exponent_recovers_power_laws():
    """T13 helper: the fitted exponent of c T^a is a; bounds' exponents come out as stated."""
    T = np.arange(2, 40)
    assert tx.growth_exponent(T, 3 * T**1.5) == pytest.approx(1.5)
    big = np.arange(1000, 4000, 500)
    cls = [tr.classical_bound(int(t), 1e-5) for t in big]
    pm = [tr.pm_kl_bound(int(t), 1e-9) for t in big]
    assert tx.growth_exponent(big, cls) == pytest.approx(2, abs=0.01)
    assert tx.growth_exponent(big, pm) == pytest.approx(1.5, abs=0.01)
    with pytest.raises(ValueError, match="two positive"):
        tx.growth_exponent([1, 2], [0, 0])


# -- T12 ----------------------------------------------------------------------------------------
KL = torch.tensor([[0.01, 0.02, 0.5], [0.05, 0.05, 0.05], [0.3, 0.0, 0.0], [0.0, 0.9, 9.0]])
ALIVE = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize("criterion, want", [
    ("max", [False, True, False, True]),    # alive maxima .5 .05 .3 0 against 0.1
    ("avg", [False, True, True, True]),     # alive means .177 .05 .15 0 against 0.16
    ("both", [False, True, False, True]),
])
def test_T12_mask_hand_computed(criterion, want):
    """T12: max / avg / both from exact per-token KL; dead tokens (9.0 after EOS) ignored."""
    keep = tm.trm_mask(ALIVE, criterion, kl=KL, delta_max=0.1, delta_avg=0.16)
    assert keep.tolist() == want


def test_T12_sampled_token_estimators_k2_for_max_k3_for_avg():
    """T12: with log-ratios only, the max filter reads k2 = (log rho)^2/2, the avg reads k3."""
    lr = torch.tensor([[0.1, -0.5], [0.2, 0.2]])                        # k2: .005 .125 | .02 .02
    alive = torch.ones(2, 2, dtype=torch.bool)
    assert tm.trm_mask(alive, "max", log_ratio=lr, delta_max=0.1).tolist() == [False, True]
    k3_mean = (lr.exp() - 1 - lr).mean(-1)                              # .056 .021
    got = tm.trm_mask(alive, "avg", log_ratio=lr, delta_avg=0.05)
    assert got.tolist() == (k3_mean <= 0.05).tolist() == [False, True]


@given(tabular_policies(max_v=8, max_t=1, allow_eos=False), st.floats(0.01, 5.0))
def test_T12_k3_is_unbiased_for_kl_under_roll(roll, scale):
    """T12: E_{v~pi_roll}[k3(log rho_v)] = KL(pi_roll || pi_theta) exactly, and k3 >= 0."""
    theta = roll.perturbed(scale, seed=1)
    kl = context_kl(roll, theta).item()
    assert k3_expectation(roll, theta).item() == pytest.approx(kl, rel=1e-9, abs=1e-13)
    assert (k3(theta.log_probs() - roll.log_probs()) >= 0).all()


def test_T12_rejected_sequences_add_zero_and_divide_by_total():
    """T12: loss = sum over kept sequences / total B (not / number kept)."""
    tok = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    keep = torch.tensor([True, False, True, False])
    loss, metrics = tm.trm_masked_loss(tok, ALIVE, keep)
    assert loss.item() == pytest.approx((0 + 1 + 2 + 6 + 7) / 4)
    assert metrics["trm/accept_rate"] == 0.5
    none, _ = tm.trm_masked_loss(tok, ALIVE, torch.zeros(4, dtype=torch.bool))
    assert none.item() == 0


@pytest.mark.parametrize("q, T", [(0.01, 1), (0.01, 64), (0.05, 16), (0.002, 256)])
def test_T12_acceptance_probability_by_simulation(q, T):
    """T12 length bias: P(accept) = (1 - q)^T, matched by simulation within 5 standard errors."""
    row = tx.acceptance_table([q], [T], B=20_000).iloc[0]  # the T12 check's measurement
    assert row.theory == pytest.approx((1 - q) ** T)
    assert row.z < 5


@pytest.mark.parametrize("kwargs, match", [
    (dict(kl=KL), "delta_max"), (dict(kl=KL, criterion="avg", delta_max=0.1), "delta_avg"),
    (dict(kl=KL, log_ratio=KL, delta_max=0.1), "exactly one"), (dict(delta_max=0.1), "exactly one"),
    (dict(kl=-KL, delta_max=0.1), "kl"), (dict(kl=KL * float("nan"), delta_max=0.1), "kl"),
    (dict(log_ratio=KL * float("nan"), delta_max=0.1), "log_ratio"),
    (dict(kl=KL[:, :2], delta_max=0.1), "mask"), (dict(kl=KL[0], delta_max=0.1), r"\(B, T\)"),
    (dict(kl=KL, criterion="median", delta_max=0.1), "one of"),
    (dict(kl=KL, delta_max=-1.0), "delta_max"),
])
def test_T12_mask_rejects_bad_input(kwargs, match):
    criterion = kwargs.pop("criterion", "max")
    with pytest.raises(ValueError, match=match):
        tm.trm_mask(ALIVE, criterion, **kwargs)


def test_T12_loss_and_acceptance_reject_bad_input():
    with pytest.raises(ValueError, match="keep"):
        tm.trm_masked_loss(torch.ones(4, 3), ALIVE, torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        tm.trm_masked_loss(torch.ones(4, 2), ALIVE, torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="q"):
        tm.acceptance_prob(1.5, 4)
    with pytest.raises(ValueError, match="T"):
        tm.acceptance_prob(0.1, 0)
