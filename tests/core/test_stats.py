"""Chunked per-token statistics against the obvious log_softmax code (tailtheory.core.stats).

Claims touched: S1 (the custom backward is e_k - p), S2/S3 (sum p^2), P1 (pruned mass), and the
token KL of T12. The fast path is checked against its naive reference on Hypothesis inputs.
"""

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from tailtheory.core.stats import naive_token_stats, token_stats

RTOL_F64, ATOL_F64 = 1e-12, 1e-12
"""float64: the chunked and naive code agree to rounding."""
RTOL_F32, ATOL_F32 = 1e-5, 2e-5
"""float32: logp up to ~-150 (scale 30, V = 2048); observed worst ~3e-6 relative."""


@st.composite
def stats_inputs(draw, dtype=torch.float64, max_v=300):
    """Logits, tokens, reference logits, a keep mask holding every token, temperature, chunk."""
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    V = draw(st.one_of(st.integers(2, max_v), st.sampled_from([2, max_v])))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 30.0]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    z = torch.randn(B, T, V, generator=g, dtype=torch.float64) * scale + draw(st.floats(-50, 50))
    ref = z + torch.randn(B, T, V, generator=g, dtype=torch.float64) * draw(
        st.sampled_from([0.0, 0.01, 1.0]))
    k = torch.randint(0, V, (B, T), generator=g)
    keep = None
    if draw(st.booleans()):
        keep = torch.rand(B, T, V, generator=g) < draw(st.floats(0.0, 1.0))
        keep.scatter_(-1, k.unsqueeze(-1), True)  # the sampled token is kept by construction
    tau = draw(st.sampled_from([1.0, 0.3, 2.0]))
    chunk = draw(st.one_of(st.none(), st.integers(1, 8)))
    return z.to(dtype), k, ref.to(dtype), keep, tau, chunk


def _assert_agree(fast, slow, rtol, atol):
    assert fast.keys() == slow.keys()
    for name in fast:
        torch.testing.assert_close(fast[name], slow[name], rtol=rtol, atol=atol, msg=name)


@given(stats_inputs())
@example((torch.tensor([[[0.0, -300.0, 300.0]]], dtype=torch.float64), torch.tensor([[1]]),
          torch.tensor([[[300.0, 0.0, -300.0]]], dtype=torch.float64), None, 1.0, 1))
def test_chunked_equals_naive_float64(args):
    """Every statistic of the chunked pass equals the log_softmax reference in float64."""
    z, k, ref, keep, tau, chunk = args
    fast = token_stats(z, k, ref_logits=ref, keep=keep, temperature=tau, chunk_size=chunk)
    slow = naive_token_stats(z, k, ref_logits=ref, keep=keep, temperature=tau)
    _assert_agree(fast, slow, RTOL_F64, ATOL_F64)


@given(stats_inputs(dtype=torch.float32, max_v=2048))
def test_chunked_equals_naive_float32(args):
    """float32 agreement within the stated tolerance (both compute in float32)."""
    z, k, ref, keep, tau, chunk = args
    fast = token_stats(z, k, ref_logits=ref, keep=keep, temperature=tau, chunk_size=chunk)
    slow = naive_token_stats(z, k, ref_logits=ref, keep=keep, temperature=tau)
    assert all(v.dtype == torch.float32 for v in fast.values())
    _assert_agree(fast, slow, RTOL_F32, ATOL_F32)


def test_bfloat16_logits_computed_in_float32():
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(2, 5, 400, generator=g) * 4).bfloat16()
    k = torch.randint(0, 400, (2, 5), generator=g)
    fast, slow = token_stats(z, k, chunk_size=3), naive_token_stats(z, k)
    assert fast["logp"].dtype == torch.float32
    _assert_agree(fast, slow, RTOL_F32, ATOL_F32)


@given(stats_inputs())
def test_logp_gradient_equals_naive_autograd(args):
    """S1 through the custom backward: d logp / dz = (e_k - pi)/tau on S, as autograd finds."""
    z, k, _, keep, tau, chunk = args
    w = torch.randn(k.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    za, zb = z.clone().requires_grad_(), z.clone().requires_grad_()
    (token_stats(za, k, keep=keep, temperature=tau, chunk_size=chunk)["logp"] * w).sum().backward()
    (naive_token_stats(zb, k, keep=keep, temperature=tau)["logp"] * w).sum().backward()
    torch.testing.assert_close(za.grad, zb.grad, rtol=RTOL_F64, atol=ATOL_F64)


def test_gradcheck_and_detached_stats():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(2, 3, 7, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randint(0, 7, (2, 3), generator=g)
    keep = torch.rand(2, 3, 7, generator=g) > 0.4
    keep.scatter_(-1, k.unsqueeze(-1), True)
    assert torch.autograd.gradcheck(
        lambda x: token_stats(x, k, keep=keep, temperature=0.7, chunk_size=2)["logp"], (z,))
    st_ = token_stats(z, k, ref_logits=z.detach() + 1, keep=keep)
    assert st_["logp"].requires_grad
    assert not any(st_[n].requires_grad for n in ("entropy", "sum_p2", "kl", "pruned_mass"))


def _saved_bytes_besides(z, fn) -> int:
    """Bytes autograd saves for backward, not counting the logits' own storage."""
    total = []

    def pack(t):
        if t.untyped_storage().data_ptr() != z.untyped_storage().data_ptr():
            total.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(z)
    return sum(total)


def test_autograd_memory_is_chunk_friendly():
    """The chunked logp saves no (B, T, V) activation; the naive one saves the log_softmax."""
    z = torch.randn(4, 64, 1000, requires_grad=True)
    k = torch.randint(0, 1000, (4, 64))
    full = z.numel() * z.element_size()
    chunked = _saved_bytes_besides(z, lambda x: token_stats(x, k, temperature=0.5)["logp"])
    naive = _saved_bytes_besides(z, lambda x: naive_token_stats(x, k, temperature=0.5)["logp"])
    assert chunked < 0.01 * full, chunked
    assert naive >= full  # the reference really is the memory-hungry one


def test_chunk_size_does_not_change_the_numbers():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(3, 9, 50, generator=g, dtype=torch.float64) * 5
    k = torch.randint(0, 50, (3, 9), generator=g)
    ref = token_stats(z, k, ref_logits=z * 0.9, chunk_size=10_000)
    for c in (1, 2, 4, 5, 27):
        _assert_agree(token_stats(z, k, ref_logits=z * 0.9, chunk_size=c), ref, 0, 1e-14)


@given(stats_inputs())
def test_stat_ranges(args):
    """0 <= H <= log|S|, 1/|S| <= sum p^2 <= 1, KL >= 0, KL(z || z) = 0, 0 <= m <= 1, logp <= 0."""
    z, k, ref, keep, tau, chunk = args
    s = token_stats(z, k, ref_logits=ref, keep=keep, temperature=tau, chunk_size=chunk)
    n_kept = (keep.sum(-1) if keep is not None else torch.full(k.shape, z.shape[-1])).double()
    tol = 1e-12
    assert (s["logp"] <= tol).all()
    assert (s["entropy"] >= -tol).all() and (s["entropy"] <= n_kept.log() + tol).all()
    assert (s["sum_p2"] >= 1 / n_kept - tol).all() and (s["sum_p2"] <= 1 + tol).all()
    assert (s["kl"] >= -tol).all()
    same = token_stats(z, k, ref_logits=z, keep=keep, temperature=tau, chunk_size=chunk)
    assert same["kl"].abs().max() <= tol
    if keep is not None:
        assert (s["pruned_mass"] >= -tol).all() and (s["pruned_mass"] <= 1).all()


def test_pruned_mass_matches_P1_and_full_keep_is_no_pruning():
    """P1: the pruned policy's logp is log pi(k) - log pi(S) with pi(S) = 1 - m."""
    g = torch.Generator().manual_seed(4)
    z = torch.randn(2, 4, 30, generator=g, dtype=torch.float64) * 3
    k = torch.randint(0, 30, (2, 4), generator=g)
    keep = torch.rand(2, 4, 30, generator=g) > 0.5
    keep.scatter_(-1, k.unsqueeze(-1), True)
    full, pruned = token_stats(z, k), token_stats(z, k, keep=keep)
    torch.testing.assert_close(pruned["logp"], full["logp"] - torch.log1p(-pruned["pruned_mass"]),
                               rtol=0, atol=1e-13)
    everything = token_stats(z, k, keep=torch.ones_like(keep))
    assert everything["pruned_mass"].abs().max() == 0
    torch.testing.assert_close(everything["logp"], full["logp"], rtol=0, atol=1e-14)


def test_uniform_logits_closed_form():
    V = 64
    s = token_stats(torch.zeros(1, 2, V), torch.tensor([[0, 5]]))
    assert torch.allclose(s["logp"], torch.full((1, 2), -math.log(V)))
    assert torch.allclose(s["entropy"], torch.full((1, 2), math.log(V)))
    assert torch.allclose(s["sum_p2"], torch.full((1, 2), 1 / V))


Z = torch.zeros(2, 3, 5)
K = torch.zeros(2, 3, dtype=torch.long)


@pytest.mark.parametrize("kwargs, match", [
    (dict(logits=torch.full((2, 3, 5), float("nan")), tokens=K),
     r"^logits .*contains .*non-finite"),
    (dict(logits=Z.clone().index_put_((torch.tensor(1),), torch.tensor(float("inf"))), tokens=K),
     r"^logits .*contains .*non-finite"),
    (dict(logits=Z, tokens=K, ref_logits=torch.full((2, 3, 5), float("-inf"))),
     r"^ref_logits .*every entry is -inf"),
    (dict(logits=torch.full((2, 3, 5), float("-inf")), tokens=K), r"^logits .*every entry is -inf"),
    (dict(logits=Z.clone().index_put_((torch.tensor(1), torch.tensor(1)), torch.tensor(
        [float("-inf")] * 5)), tokens=K), r"^logits .*every entry is -inf"),
    (dict(logits=torch.zeros(2, 5), tokens=K), "logits must have shape"),
    (dict(logits=Z, tokens=torch.zeros(2, 4, dtype=torch.long)), "tokens has shape"),
    (dict(logits=Z, tokens=K + 5), r"tokens must lie in \[0, 5\)"),
    (dict(logits=Z, tokens=K - 1), r"tokens must lie in \[0, 5\)"),
    (dict(logits=Z, tokens=K.float()), "tokens must hold integer"),
    (dict(logits=Z, tokens=K, ref_logits=torch.zeros(2, 3, 6)), "ref_logits .* same shape"),
    (dict(logits=Z, tokens=K, keep=torch.ones(2, 3, 4, dtype=torch.bool)), "keep has shape"),
    (dict(logits=Z, tokens=K, keep=torch.full((2, 3, 5), 0.5)), "keep must be a bool"),
    (dict(logits=Z.clone().index_fill_(-1, torch.tensor([1, 2, 3, 4]), float("-inf")),
          tokens=K + 1, keep=torch.ones(2, 3, 5, dtype=torch.bool).index_fill_(
              -1, torch.tensor([0]), False)), "keep must keep at least one token whose logit"),
    (dict(logits=Z, tokens=K, keep=torch.zeros(2, 3, 5, dtype=torch.bool)), "keep must keep"),
    (dict(logits=Z, tokens=K, keep=torch.ones(2, 3, 5, dtype=torch.bool).index_fill_(
        -1, torch.tensor([0]), False)), "tokens must lie inside the kept"),
    (dict(logits=Z, tokens=K, temperature=0.0), "temperature"),
    (dict(logits=Z, tokens=K, temperature=float("nan")), "temperature"),
    (dict(logits=Z, tokens=K, chunk_size=0), "chunk_size"),
])
def test_bad_input_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        token_stats(**kwargs)
    naive_kwargs = {k: v for k, v in kwargs.items() if k != "chunk_size"}
    if "chunk_size" not in kwargs:
        with pytest.raises(ValueError):
            naive_token_stats(**naive_kwargs)


def test_empty_sequence_is_fine():
    s = token_stats(torch.zeros(2, 0, 5), torch.zeros(2, 0, dtype=torch.long))
    assert s["logp"].shape == (2, 0)


# --- -inf logits are masked tokens -------------------------------------------------------------

@given(stats_inputs(), st.integers(0, 2**31 - 1), st.floats(0.0, 0.9))
def test_minus_inf_logits_equal_the_keep_mask(args, seed, frac):
    """A ``-inf`` logit is a pruned token: the statistics equal those with ``keep`` removing it
    (pruned_mass aside, which counts the mass ``keep`` removes, 0 for -inf logits)."""
    z, k, ref, _, tau, chunk = args
    g = torch.Generator().manual_seed(seed)
    dead = torch.rand(z.shape, generator=g, dtype=torch.float64) < frac
    dead.scatter_(-1, k.unsqueeze(-1), False)          # the sampled token stays alive
    zm, rm = z.masked_fill(dead, -math.inf), ref.masked_fill(dead, -math.inf)
    got = token_stats(zm, k, ref_logits=rm, temperature=tau, chunk_size=chunk)
    want = token_stats(z, k, ref_logits=ref, keep=~dead, temperature=tau, chunk_size=chunk)
    want.pop("pruned_mass")
    _assert_agree(got, want, RTOL_F64, ATOL_F64)
    _assert_agree(got, naive_token_stats(zm, k, ref_logits=rm, temperature=tau), RTOL_F64,
                  ATOL_F64)
    assert all(torch.isfinite(v).all() for v in got.values())


def test_minus_inf_logits_gradient_and_masked_token():
    """The chunked backward handles -inf entries (gradient 0 there, e_k - p elsewhere); a
    sampled token at a -inf logit has logp = -inf, the honest value."""
    z = torch.tensor([[[0.0, -math.inf, 1.0, 2.0]]], dtype=torch.float64, requires_grad=True)
    k = torch.tensor([[2]])
    token_stats(z, k, chunk_size=1)["logp"].sum().backward()
    p = torch.softmax(z.detach(), -1)
    torch.testing.assert_close(z.grad, torch.nn.functional.one_hot(k, 4).double() - p)
    assert z.grad[0, 0, 1] == 0
    assert token_stats(z.detach(), torch.tensor([[1]]))["logp"].item() == -math.inf


def test_numeric_zero_one_keep_is_a_mask():
    """One rule for masks: 0/1 numbers are accepted and mean what the bool mask means."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(2, 3, 7, generator=g, dtype=torch.float64)
    k = torch.zeros(2, 3, dtype=torch.long)
    keep = torch.rand(2, 3, 7, generator=g) < 0.6
    keep[..., 0] = True
    want = token_stats(z, k, keep=keep)
    for as_num in (keep.long(), keep.float(), keep.numpy().astype("uint8")):
        _assert_agree(token_stats(z, k, keep=as_num), want, 0, 0)


def test_masked_mean_is_detached_float64_and_zero_on_an_empty_mask():
    from tailtheory.core.stats import masked_mean

    x = torch.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [False, True, False]])
    assert masked_mean(x, mask) == (1.0 + 2.0 + 16.0) / 3
    assert masked_mean(mask, mask) == 1.0
    assert masked_mean(x, torch.zeros_like(mask)) == 0.0
