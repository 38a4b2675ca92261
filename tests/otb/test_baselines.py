"""Token-level advantages (tailtheory.otb.baselines): O1 energy, O5 self-inclusion, OTB against a
loop over its definition, and every bad input. The group estimators it is compared with (GRPO,
Dr. GRPO, RLOO) live in the engine: tests/engine/test_advantages.py."""

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from strategies import grouped_batches, logits, masked_logits, tabular_policies
from tailtheory.engine.advantages import dr_grpo_advantages, rloo_advantages
from tailtheory.otb.baselines import (OTB_EPS, SUM_P2_TOL, optimal_token_baseline,
                                      otb_leave_one_out, realized_energy,
                                      self_inclusion_residual, token_energy)
from tailtheory.core.tabular import TabularPolicy
from tailtheory.otb.variance import autograd_sq_norms

ATOL = 1e-12


# --- O1: the energy is the squared score norm ---------------------------------------------------

@given(tabular_policies(max_sequences=60, max_scale=5.0))
@example(TabularPolicy.random(3, 2, eos=0, sharpness=30.0, seed=1))
def test_o1_energy_is_exact_squared_score_norm(pol):
    """O1: w_t from Sum p^2 and pi_t equals the autograd squared score norm (tabular policy)."""
    sum_p2 = pol.probs().pow(2).sum(-1)[pol.ctx]
    w = token_energy(sum_p2, pol.token_logp, pol.mask)
    assert torch.allclose(w, autograd_sq_norms(pol), atol=ATOL, rtol=0)


@given(logits(max_v=512, batch=(2, 3)))
def test_o1_energy_from_logits_equals_from_sum_p2_and_is_shift_invariant(z):
    """O1: logits (B,T,V) and precomputed Sum p^2 (B,T) agree; adding a constant changes nothing."""
    k = torch.argmax(z, -1)
    logp = torch.log_softmax(z, -1).gather(-1, k[..., None])[..., 0]
    mask = torch.ones(2, 3, dtype=torch.bool)
    w = token_energy(z, logp, mask)
    w2 = token_energy(torch.softmax(z, -1).pow(2).sum(-1), logp, mask)
    w3 = token_energy(z + 7.5, logp, mask)
    e = torch.nn.functional.one_hot(k, z.shape[-1]) - torch.softmax(z, -1)
    assert torch.allclose(w, e.pow(2).sum(-1), atol=1e-12)
    assert torch.allclose(w, w2, atol=1e-12) and torch.allclose(w, w3, atol=1e-12)
    assert (w >= 0).all()


def test_o1_realized_energy_runs_over_alive_positions_and_is_zero_when_greedy():
    """W_t = cumulative sum of m_j w_j: flat after EOS, 0 for a deterministic policy."""
    z = torch.tensor([[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])             # (1, 3, 2): uniform
    logp = torch.full((1, 3), math.log(0.5))
    mask = torch.tensor([[True, True, False]])
    W = realized_energy(z, logp, mask)
    assert torch.allclose(W, torch.tensor([[0.5, 1.0, 1.0]], dtype=torch.float64))
    greedy = torch.tensor([[[0.0, -1e4]] * 3])
    assert realized_energy(greedy, torch.zeros(1, 3), mask).abs().max() < 1e-300


@pytest.mark.parametrize("args, match", [
    ((torch.ones(2, 3), torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool)), "mask"),
    ((torch.ones(2, 4), torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)), "positions"),
    ((torch.ones(2, 3), torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool)), "selects no"),
    ((torch.ones(3), torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)), "logits_or_sum_p2"),
    ((-torch.ones(2, 3), torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)), ">= 0"),
    ((torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)), "<= 0"),
    ((torch.ones(2, 3), torch.full((2, 3), float("nan")), torch.ones(2, 3, dtype=torch.bool)),
     "token_logp"),
])
def test_energy_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        realized_energy(*args)


def test_o1_energy_rejects_impossible_sum_p2_at_alive_positions_only():
    """O1: sum_p2 > 1 (w would exceed 2) or sum_p2 < pi^2 (w clamped) raises, naming the
    argument; the same values at dead positions, or within SUM_P2_TOL, are accepted."""
    logp = torch.full((1, 2), math.log(0.5))
    alive = torch.tensor([[True, False]])
    for bad in (3.0, 1 + 10 * SUM_P2_TOL, 0.25 - 10 * SUM_P2_TOL, 0.0):
        with pytest.raises(ValueError, match="logits_or_sum_p2"):
            token_energy(torch.tensor([[bad, 0.5]]), logp, alive)
        w = token_energy(torch.tensor([[0.5, bad]]), logp, alive)   # bad value at a dead slot
        assert w[0, 1] == 0 and torch.isclose(w[0, 0], torch.tensor(0.5, dtype=w.dtype))
    edge = torch.tensor([[1 + SUM_P2_TOL / 2, 0.25 - SUM_P2_TOL / 2]])
    assert (token_energy(edge, logp, torch.ones(1, 2, dtype=torch.bool)) >= 0).all()


# --- OTB and the group estimators against loops over their definitions -------------------------

def _otb_loop(R, gid, mask, W, eps=OTB_EPS):
    B, T = mask.shape
    A = torch.zeros(B, T, dtype=torch.float64)
    for i in range(B):
        peers = [j for j in range(B) if gid[j] == gid[i]]
        for t in range(T):
            if not mask[i, t]:
                continue
            if len(peers) == 1:
                A[i, t] = R[i]
                continue
            alive = [j for j in peers if mask[j, t]]
            num = sum(float(R[j] * W[j, t]) for j in alive)
            den = sum(float(W[j, t]) for j in alive)
            A[i, t] = R[i] - num / (den + eps)
    return A


@given(grouped_batches(min_group=1))
def test_otb_equals_loop_over_definition(batch):
    """B*_t = sum G W / (sum W + eps) over alive peers; A = (G - B*) m; a group of one: A = G."""
    R, gid, mask, W = batch
    assert torch.allclose(optimal_token_baseline(R, W, mask, gid), _otb_loop(R, gid, mask, W),
                          atol=1e-12)


@given(grouped_batches(), st.floats(-3, 3))
def test_otb_alive_only_and_shift_equivariant(batch, c):
    """Dead positions of peers do not move B*; adding c to every reward leaves A unchanged up to
    the eps term (B* moves by c sum W / (sum W + eps))."""
    R, gid, mask, W = batch
    A = optimal_token_baseline(R, W, mask, gid)
    junk = torch.where(mask, W, W + 5.0)                                 # energy where dead
    assert torch.allclose(optimal_token_baseline(R, junk, mask, gid), A, atol=1e-12)
    A0 = optimal_token_baseline(R, W, mask, gid, eps=0.0)
    Ac = optimal_token_baseline(R + c, W, mask, gid, eps=0.0)
    has_weight = W > 0
    assert torch.allclose(Ac[has_weight], A0[has_weight], atol=1e-9)
    assert (A[~mask] == 0).all()


def test_otb_rewards_to_go_and_numpy_inputs():
    """(B, T) rewards-to-go are used per position; numpy and string group ids accepted."""
    G = np.array([[1.0, 0.5], [0.0, 0.0], [2.0, 1.0]])
    W = np.array([[1.0, 2.0], [1.0, 1.0], [1.0, 1.0]])
    mask = np.ones((3, 2), dtype=bool)
    A = optimal_token_baseline(G, W, mask, np.array(["a", "a", "b"]))
    assert torch.allclose(A[:2, 0], torch.tensor([0.5, -0.5], dtype=torch.float64), atol=1e-7)
    assert torch.allclose(A[:2, 1], torch.tensor([0.5 - 1 / 3, -1 / 3], dtype=torch.float64),
                          atol=1e-7)
    assert torch.equal(A[2], torch.tensor([2.0, 1.0], dtype=torch.float64))   # group of one


# --- O5: OTB is a shrunk weighted RLOO ---------------------------------------------------------

@given(grouped_batches())
@example((torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.ones(2, 1, dtype=torch.bool),
          torch.tensor([[1e-12], [5.0]], dtype=torch.float64)))
def test_o5_self_inclusion_identity(batch):
    """O5: G^i - B* = W^-i / (W^i + W^-i) (G^i - B^-i), exactly (eps = 0)."""
    R, gid, mask, W = batch
    res, has_rest = self_inclusion_residual(R, W, mask, gid)  # the O5 check's measurement
    assert has_rest.any() or (W == 0).any()
    assert res.abs().max() <= ATOL
    shrink, _ = otb_leave_one_out(R, W, mask, gid)
    assert ((shrink >= 0) & (shrink <= 1)).all()


def test_o5_shrink_is_one_minus_own_share_and_rloo_when_weights_equal():
    """With equal W the shrunk weighted RLOO is (N-1)/N times plain RLOO, i.e. Dr. GRPO."""
    R = torch.tensor([1.0, 0.0, 0.0, 1.0])
    gid = torch.zeros(4, dtype=torch.long)
    mask = torch.ones(4, 3, dtype=torch.bool)
    W = torch.ones(4, 3, dtype=torch.float64)
    shrink, _ = otb_leave_one_out(R, W, mask, gid)
    assert torch.allclose(shrink, torch.full((4, 3), 0.75, dtype=torch.float64))
    otb = optimal_token_baseline(R, W, mask, gid, eps=0.0)
    assert torch.allclose(otb, 0.75 * rloo_advantages(R, gid, mask), atol=1e-12)
    assert torch.allclose(otb, dr_grpo_advantages(R, gid, mask), atol=1e-12)


# --- bad input and edge cases -------------------------------------------------------------------

R3 = torch.tensor([1.0, 0.0, 1.0])
M3 = torch.ones(3, 2, dtype=torch.bool)
W3 = torch.ones(3, 2, dtype=torch.float64)


@pytest.mark.parametrize("kwargs, match", [
    (dict(group_ids=torch.tensor([0, 0])), "group_ids"),
    (dict(mask=torch.ones(2, 2, dtype=torch.bool)), "mask"),
    (dict(mask=torch.zeros(3, 2, dtype=torch.bool)), "selects no"),
    (dict(returns=torch.tensor([1.0, float("nan"), 0.0])), "NaN"),
    (dict(mask=torch.ones(3, dtype=torch.bool)), "mask"),
])
def test_otb_estimator_bad_input(kwargs, match):
    """OTB checks its inputs as the group estimators do (``tests/engine/test_advantages.py``)."""
    args = dict(returns=R3, group_ids=torch.tensor([0, 0, 1]), mask=M3, energy=W3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        optimal_token_baseline(**args)


def test_otb_bad_energy():
    with pytest.raises(ValueError, match="energy"):
        optimal_token_baseline(R3, torch.ones(3, 3), M3, [0, 0, 1])
    with pytest.raises(ValueError, match="energy"):
        optimal_token_baseline(R3, -W3, M3, [0, 0, 1])
    with pytest.raises(ValueError, match="returns"):
        optimal_token_baseline(torch.ones(3, 5), W3, M3, [0, 0, 1])


def test_group_of_one():
    """OTB gives A = G to a group of one (documented; the group baselines:
    tests/engine/test_advantages.py)."""
    gid = torch.tensor([0, 0, 1])
    assert (optimal_token_baseline(R3, W3, M3, gid)[2] == 1.0).all()


# --- input rules: masked logits, eps, masks, shapes ---------------------------------------------

@given(masked_logits(max_v=256, batch=(2, 3)))
def test_O1_energy_with_minus_inf_logits_equals_restricted_rows(args):
    """O1 from logits with -inf entries equals O1 from sum_p2 of each row's finite entries."""
    z, alive = args
    lp = torch.log_softmax(z, -1).amax(-1)                             # a live token's logp
    mask = torch.ones(2, 3, dtype=torch.bool)
    sp2 = torch.tensor([[float(torch.softmax(z[b, t][alive[b, t]], -1).pow(2).sum())
                         for t in range(3)] for b in range(2)], dtype=torch.float64)
    torch.testing.assert_close(token_energy(z, lp, mask), token_energy(sp2, lp, mask),
                               rtol=0, atol=1e-12)


def test_shape_mismatches_name_both_arguments():
    m = torch.ones(4, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"returns must have shape .* to match mask"):
        otb_leave_one_out(torch.zeros(3), torch.zeros(4, 2), m, [0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"energy \(4, 3\) and mask \(4, 2\)"):
        optimal_token_baseline(torch.zeros(4), torch.zeros(4, 3), m, [0, 0, 1, 1])
