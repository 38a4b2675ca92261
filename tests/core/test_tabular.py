"""The tabular enumerator: vectorised enumeration equals the loop over the definition."""

import time

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from strategies import tabular_policies
from tailtheory.core.tabular import (MAX_SEQUENCES, TabularPolicy, check_enumerable, random_rewards,
                                reference_enumeration, tree_size)


pytestmark = pytest.mark.usefixtures("one_thread")


def _as_dict(pol: TabularPolicy) -> dict:
    out = {}
    for n in range(pol.seqs.shape[0]):
        m = pol.mask[n]
        out[tuple(pol.seqs[n][m].tolist())] = (pol.seq_prob[n].item(),
                                                tuple(pol.ctx[n][m].tolist()))
    return out


@given(tabular_policies(max_sequences=400))
@example(TabularPolicy.random(3, 3, eos=1, sharpness=30.0, seed=0))
@example(TabularPolicy.random(2, 1, eos=None))
def test_vectorised_enumeration_equals_reference_loop(pol):
    """Every sequence once, same probability and same context rows as the naive loop."""
    ref = reference_enumeration(pol.logits, pol.V, pol.T, pol.eos)
    got = _as_dict(pol)
    assert len(got) == pol.seqs.shape[0] == len(ref) == tree_size(pol.V, pol.T, pol.eos)[1]
    assert set(got) == set(ref)
    for s, (p, rows) in ref.items():
        assert abs(got[s][0] - p) < 1e-12 and got[s][1] == rows


@given(tabular_policies())
def test_tree_invariants(pol):
    """Probabilities sum to 1; dead positions follow EOS; depth of a used context is t."""
    assert abs(pol.seq_prob.sum().item() - 1) < 1e-9
    assert (pol.token_logp[~pol.mask] == 0).all()
    t = torch.arange(pol.T).expand_as(pol.seqs)
    assert (pol.context_depth()[pol.ctx][pol.mask] == t[pol.mask]).all()
    assert pol.mask[:, 0].all()
    if pol.eos is not None:
        ended = torch.cumsum((pol.seqs == pol.eos) & pol.mask, 1)
        assert (pol.mask[:, 1:] == (ended[:, :-1] == 0)).all()
    else:
        assert pol.mask.all()


@given(tabular_policies())
def test_context_prob_sums_to_alive_mass_per_depth(pol):
    """sum over depth-t contexts of d_t = P(position t alive); root reached surely."""
    cp, depth = pol.context_prob(), pol.context_depth()
    alive = pol.expect(pol.mask.double())                               # (T,)
    per_depth = torch.zeros(pol.T, dtype=torch.float64).index_add_(0, depth, cp)
    assert torch.allclose(per_depth, alive, atol=1e-12)
    assert abs(cp[0].item() - 1) < 1e-12


def test_context_prob_matches_product_of_parents():
    """d of a child context = d of its parent times pi(token | parent) (V=3, T=3, no EOS)."""
    pol = TabularPolicy.random(3, 3, sharpness=2.0, seed=4)
    p, cp = pol.probs(), pol.context_prob()
    # row 1 + v is the prefix (v,); row 4 + 3 v + w is (v, w)
    for v in range(3):
        assert abs(cp[1 + v] - p[0, v]) < 1e-14
        for w in range(3):
            assert abs(cp[4 + 3 * v + w] - p[0, v] * p[1 + v, w]) < 1e-14


def test_pruned_tokens_get_zero_probability():
    pol = TabularPolicy.random(3, 2, sharpness=1.0, seed=0)
    z = pol.logits.clone()
    z[0, 2] = -float("inf")
    pruned = pol.with_logits(z)
    assert pruned.seq_prob[pruned.seqs[:, 0] == 2].sum() == 0
    assert abs(pruned.seq_prob.sum().item() - 1) < 1e-12
    assert pruned.seqs is pol.seqs                                      # tree shared


def test_expect_and_rewards():
    pol = TabularPolicy.random(2, 3, seed=1)
    R = random_rewards(pol, seed=2)
    assert R.shape == (8,) and 0 <= R.min() and R.max() <= 1
    assert torch.allclose(pol.expect(R), (pol.seq_prob * R).sum())
    assert pol.expect(torch.ones(8, 2)).shape == (2,)
    with pytest.raises(ValueError, match="values"):
        pol.expect(torch.ones(7))


def test_perturbed_sparse_touches_few_contexts():
    pol = TabularPolicy.random(2, 6, seed=0)
    th = pol.perturbed(1.0, frac=0.05, seed=3)
    changed = (th.logits != pol.logits).any(-1)
    assert changed.sum() == round(0.05 * pol.logits.shape[0])
    assert (pol.perturbed(0.0).logits == pol.logits).all()
    with pytest.raises(ValueError, match="frac"):
        pol.perturbed(1.0, frac=0.0)
    with pytest.raises(ValueError, match="scale"):
        pol.perturbed(-1.0)


def test_million_sequences_within_seconds():
    """V^T = 4^10 ~ 10^6 sequences enumerate and sum in a few seconds."""
    t0 = time.perf_counter()
    pol = TabularPolicy.random(4, 10, sharpness=1.0, seed=0)
    total = pol.seq_prob.sum().item()
    cp = pol.context_prob()
    elapsed = time.perf_counter() - t0
    assert pol.seqs.shape == (4**10, 10) and abs(total - 1) < 1e-9 and cp.shape[0] == 349525
    assert elapsed < 15, elapsed


def test_too_large_raises_before_allocating():
    with pytest.raises(ValueError, match=r"sequences .* limit is"):
        check_enumerable(32_000, 8)
    with pytest.raises(ValueError, match=f"{MAX_SEQUENCES:,}"):
        TabularPolicy.random(2, 40)


@pytest.mark.parametrize("kwargs, match", [
    (dict(V=0, T=2), "V"), (dict(V=2, T=0), "T"), (dict(V=1, T=2, eos=0), "V"),
    (dict(V=3, T=2, eos=3), "eos"), (dict(V=2.5, T=2), "V"),
])
def test_bad_tree_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tree_size(**kwargs)


@pytest.mark.parametrize("fill, match", [
    (float("nan"), "NaN"), (float("inf"), r"\+inf"),
])
def test_bad_logits_values(fill, match):
    z = torch.zeros(3, 2, dtype=torch.float64)
    z[1, 0] = fill
    with pytest.raises(ValueError, match=match):
        TabularPolicy(z, V=2, T=2)


def test_bad_logits_shape_and_dead_row():
    with pytest.raises(ValueError, match="shape"):
        TabularPolicy(np.zeros((2, 2)), V=2, T=2)
    z = torch.zeros(3, 2, dtype=torch.float64)
    z[2] = -float("inf")
    with pytest.raises(ValueError, match="at least one finite"):
        TabularPolicy(z, V=2, T=2)
    with pytest.raises(ValueError, match="sharpness"):
        TabularPolicy.random(2, 2, sharpness=-1.0)


@given(st.integers(1, 5), st.integers(1, 6), st.booleans())
def test_tree_size_closed_form(V, T, with_eos):
    """P and N against the geometric sums they count."""
    eos = 0 if (with_eos and V >= 2) else None
    P, N = tree_size(V, T, eos)
    b = V if eos is None else V - 1
    assert P == sum(b**t for t in range(T))
    assert N == (V**T if eos is None else sum(b**t for t in range(T + 1)))
