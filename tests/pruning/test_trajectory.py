"""Property tests of ``tailtheory.pruning.trajectory``: DVP's claim P2 over whole trajectories,
by exact enumeration."""

import pytest
from hypothesis import example, given, target
from hypothesis import strategies as st

from strategies import tabular_policies
from tailtheory.core.tabular import TabularPolicy, random_rewards
from tailtheory.pruning.trajectory import (prune_policy, return_gap, trajectory_bias_bound,
                                           trajectory_tv)
from tailtheory.core.safeset import safe_vocab_mask
from tailtheory.pruning.vocab import pruned_mass


# --- P2: trajectories, by exact enumeration --------------------------------------------------

def _p2_case(pol, rho, r_max, seed):
    keep = safe_vocab_mask(pol.logits, "min_p", rho)
    pruned = prune_policy(pol, keep)
    b = trajectory_bias_bound(pol, keep, r_max=r_max, rho=rho)
    tv = trajectory_tv(pruned, pol)
    gap = return_gap(pruned, pol, r_max * random_rewards(pol, seed))
    witness = r_max * (pruned.seq_prob > pol.seq_prob).double()   # attains r_max * TV
    return b, tv, gap, return_gap(pruned, pol, witness)


@given(tabular_policies(max_v=5, max_t=5, max_sequences=3000), st.sampled_from(
    [1e-8, 1e-4, 1e-2, 0.1, 0.5, 1.0]), st.floats(0.1, 10.0), st.integers(0, 99))
@example(TabularPolicy.random(6, 1, sharpness=3.0, seed=0), 0.05, 1.0, 0)
def test_p2_bounds_hold_with_slack(pol, rho, r_max, seed):
    """P2: TV <= sum_t E[m]; |J~ - J| <= R_max sum_t E[m] <= R_max T max m <= min-p bound.

    Pinned: one step (T = 1), where the witness gap equals the bound sum_t E[m] = m exactly."""
    b, tv, gap, gap_w = _p2_case(pol, rho, r_max, seed)
    tol = 1e-12 * max(1.0, r_max)
    assert tv <= b["expected"] / r_max + tol
    assert gap <= b["expected"] + tol and gap_w <= b["expected"] + tol
    assert b["expected"] <= b["uniform"] + tol <= b["min_p"] + 2 * tol
    if b["expected"] > 1e-9:
        target(gap_w / b["expected"], label="P2 witness ratio")
    if pol.T == 1:
        assert gap_w == pytest.approx(b["expected"], rel=1e-9)


def test_p2_tight_at_one_step_and_small_rho():
    """P2 witnesses: T = 1 gives TV = m exactly; small rho makes the ratio -> 1 at T = 4."""
    pol = TabularPolicy.random(6, 1, sharpness=3.0, seed=0)
    keep = safe_vocab_mask(pol.logits, "min_p", 0.05)
    b = trajectory_bias_bound(pol, keep)
    assert trajectory_tv(prune_policy(pol, keep), pol) == pytest.approx(b["expected"], rel=1e-12)
    pol = TabularPolicy.random(4, 4, eos=0, sharpness=5.0, seed=1)
    keep = safe_vocab_mask(pol.logits, "min_p", 1e-3)
    b, tv, gap, gap_w = _p2_case(pol, 1e-3, 1.0, 0)
    assert gap_w == pytest.approx(tv, rel=1e-12) and 0.99 <= tv / b["expected"] <= 1 + 1e-9


def test_p2_expected_mass_matches_sequence_loop():
    """Equivalence: sum_t E_{pi~}[m(s_t)] via context probabilities = loop over sequences."""
    pol = TabularPolicy.random(3, 4, eos=1, sharpness=2.0, seed=3)
    keep = safe_vocab_mask(pol.logits, "min_p", 0.1)
    m, pruned = pruned_mass(pol.logits, keep), prune_policy(pol, keep)
    loop = sum(float(pruned.seq_prob[i]) * sum(float(m[pruned.ctx[i, t]])
                                               for t in range(pol.T) if pruned.mask[i, t])
               for i in range(pol.seqs.shape[0]))
    assert trajectory_bias_bound(pol, keep)["expected"] == pytest.approx(loop, rel=1e-12)


# --- bad input -------------------------------------------------------------------------------

def test_bad_tabular_inputs():
    a, b = TabularPolicy.random(3, 2, seed=0), TabularPolicy.random(3, 3, seed=0)
    with pytest.raises(ValueError, match="one tree"):
        trajectory_tv(a, b)
    keep = safe_vocab_mask(a.logits, "min_p", 0.1)
    with pytest.raises(ValueError, match="r_max"):
        trajectory_bias_bound(a, keep, r_max=-1.0)
    with pytest.raises(ValueError, match="same shape"):
        prune_policy(a, keep[:, :2])
