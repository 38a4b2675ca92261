"""TRM's exact quantities by enumeration of tabular pairs (``tailtheory.trm.exact``): the T9
identity, the chain rule of the sequence KL, the per-context KL against its definition, the
worst-case reward, and bad input."""

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import tabular_policies
from tailtheory.core.tabular import TabularPolicy, random_rewards
from tailtheory.trm import experiments as tx
from tailtheory.trm.exact import (context_kl, delta_t9, divergences, error, exact_report,
                                  objective, worst_case_reward)


@st.composite
def pairs(draw, max_sequences: int = 300):
    """``(pi_roll, pi_theta)``: a drawn tabular policy (long horizons with small V, or V up to
    24 with T <= 3; logits up to scale 30) and noise on all or few contexts."""
    roll = draw(st.one_of(tabular_policies(max_v=4, max_t=12, max_sequences=max_sequences),
                          tabular_policies(max_v=24, max_t=3, max_sequences=2 * max_sequences)))
    scale = draw(st.sampled_from([0.0, 0.01, 0.1, 0.5, 2.0, 8.0]))
    frac = draw(st.sampled_from([1.0, 0.3, 0.02]))
    return roll, roll.perturbed(scale, frac=frac, seed=draw(st.integers(0, 2**16)))


pytestmark = pytest.mark.usefixtures("one_thread")


@given(pairs(), st.integers(0, 100))
def test_T9_error_equals_minus_delta(pair, seed):
    """T9: Error = -Delta to rounding, for random rewards on dense and sparse pairs."""
    roll, theta = pair
    R = random_rewards(roll, seed=seed)
    rep = exact_report(roll, theta, R)
    size = 1 + abs(rep["J_theta"]) + abs(rep["J_roll"]) + abs(rep["surrogate"])
    assert abs(rep["error"] + delta_t9(roll, theta, R)) <= 1e-12 * size


@given(pairs(max_sequences=200))
def test_seq_kl_is_kl_of_sequence_laws(pair):
    """Chain rule behind T4: sum_t E_{d_t}[KL] = KL(P^roll || P^theta) over whole sequences."""
    roll, theta = pair
    p, q = roll.seq_prob, theta.seq_prob
    keep = p > 0
    direct = (p[keep] * (p[keep].log() - q[keep].log())).sum().item()
    assert divergences(roll, theta)["seq_kl"] == pytest.approx(direct, rel=1e-9, abs=1e-12)


def test_context_kl_matches_definition():
    roll = TabularPolicy.random(3, 2, sharpness=2.0, seed=0)
    theta = roll.perturbed(1.0, seed=1)
    p, q = roll.probs(), theta.probs()
    for c in range(p.shape[0]):
        want = sum(float(p[c, v]) * math.log(float(p[c, v] / q[c, v])) for v in range(3))
        assert context_kl(roll, theta)[c].item() == pytest.approx(want, rel=1e-12)


def test_worst_case_reward_maximises_error_over_all_binary_rewards():
    """|Error| is linear in R in [0,1]^N, so a vertex attains its maximum; check all 2^8."""
    roll, theta = tx.make_pair(2, 3, None, 1.0, 1.0, 1.0, seed=5)
    best = max(abs(error(roll, theta, torch.tensor(bits, dtype=torch.float64)))
               for bits in itertools.product([0.0, 1.0], repeat=8))
    assert abs(error(roll, theta, worst_case_reward(roll, theta))) == pytest.approx(best, rel=1e-12)


def test_exact_quantities_reject_bad_input():
    roll = TabularPolicy.random(2, 2, seed=0)
    with pytest.raises(ValueError, match="R must have shape"):
        objective(roll, torch.zeros(3))
    with pytest.raises(ValueError, match="R must lie"):
        objective(roll, torch.full((4,), 1.5))
    with pytest.raises(ValueError, match="share V, T"):
        context_kl(roll, TabularPolicy.random(2, 3, seed=0))
