"""LOPTI probes (tailtheory.lopti.probes): claims L4 (Figure 1 (c)-(f)) and L5 (Figure 3).

Hand-checkable properties on a tiny LM: the bins partition the tokens, keeping all bins is the sum
of the per-bin gradients, the denominator counts all tokens, lr = 0 changes nothing.
"""

import pytest
import torch

from tailtheory.lopti.probes import (N_BINS, bin_gradients, bin_grad_norms, bin_means,
                                      prob_bins, prob_change_by_bin, rise_fraction,
                                      sequence_logp, sequential_prob_change, sgd_prob_change)
from tailtheory.core.models import tiny_lm

V, B, L = 128, 6, 9


@pytest.fixture(scope="module")
def batch():
    """A tiny LM, random sequences, the response = last 5 positions, pi_old = the model's probs."""
    model = tiny_lm(vocab_size=V, hidden=32, layers=1, heads=2, kv_heads=1, seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(40.0)  # spread pi_old over all four bins
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, L), generator=g)
    with torch.no_grad():  # make half the response tokens the model's top choice (high pi)
        for t in range(L - 5, L):
            top = model(input_ids=ids[:, :t]).logits[:, -1].argmax(-1)
            ids[:, t] = torch.where(torch.arange(B) % 2 == 0, top, ids[:, t])
        pi_old = sequence_logp(model, ids).exp().double()
    mask = torch.zeros(B, L, dtype=torch.bool)
    mask[:, L - 5:] = True
    adv = torch.randn(B, L, generator=g)
    return model, ids, mask, adv, pi_old


def test_bins_are_the_fixed_right_closed_intervals_L4():
    p = torch.tensor([0.0, 0.1, 0.25, 0.2500001, 0.5, 0.6, 0.75, 0.75001, 1.0])
    assert prob_bins(p).tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3]


def test_test_batch_covers_every_bin(batch):
    _, _, mask, _, pi_old = batch
    assert set(prob_bins(pi_old)[mask].tolist()) == set(range(N_BINS))


def test_bins_partition_the_tokens_and_sum_structure_L4(batch):
    """grad L_all = sum_b grad L_b; bin b's gradient is 0 when its advantages are 0."""
    model, ids, mask, adv, pi_old = batch
    g_all, g_bins = bin_gradients(model, ids, mask, adv, pi_old)
    torch.testing.assert_close(g_bins.sum(0), g_all, rtol=1e-4, atol=1e-6)
    n_all, n_bins = bin_grad_norms(model, ids, mask, adv, pi_old)
    assert n_all <= n_bins.sum() * (1 + 1e-5) and (n_bins > 0).all()
    bins = prob_bins(pi_old)
    adv0 = torch.where(bins == 2, 0.0, adv)
    _, g0 = bin_gradients(model, ids, mask, adv0, pi_old)
    assert g0[2].abs().max() == 0 and (g0[[0, 1, 3]].norm(dim=1) > 0).all()


def test_denominator_counts_all_tokens_L4(batch):
    """Keeping bin b over all N tokens = restricting the mask to bin b, scaled by n_b / N."""
    model, ids, mask, adv, pi_old = batch
    _, g_bins = bin_gradients(model, ids, mask, adv, pi_old)
    bins = prob_bins(pi_old)
    for b in range(N_BINS):
        mb = mask & (bins == b)
        g_own, _ = bin_gradients(model, ids, mb, adv, pi_old)
        # float32 sums over a different set of rows: the last bits move with the BLAS kernels
        # (1.4e-7 on one element on an AMD EPYC), so an absolute floor as in the sum test above
        torch.testing.assert_close(g_bins[b], g_own * (mb.sum() / mask.sum()), rtol=1e-4,
                                   atol=1e-6)


def test_gradient_is_linear_in_the_advantages(batch):
    model, ids, mask, adv, pi_old = batch
    n1, b1 = bin_grad_norms(model, ids, mask, adv, pi_old)
    n2, b2 = bin_grad_norms(model, ids, mask, 2 * adv, pi_old)
    torch.testing.assert_close(n2, 2 * n1, rtol=1e-5, atol=0)
    torch.testing.assert_close(b2, 2 * b1, rtol=1e-5, atol=0)


def test_lr_zero_changes_nothing_and_model_is_untouched(batch):
    model, ids, mask, adv, pi_old = batch
    before = [p.clone() for p in model.parameters()]
    for update in ("all", "lowest", "highest"):
        dp = sgd_prob_change(model, ids, mask, adv, pi_old, lr=0.0, update=update)
        assert dp.abs().max() == 0
        prob_change_by_bin(model, ids, mask, adv, pi_old, lr=1.0, update=update)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_one_positive_token_rises_after_a_small_step_L5(batch):
    """With a single advantaged token (A > 0), a small step raises its probability (first order)."""
    model, ids, mask, _, pi_old = batch
    one = torch.zeros(B, L, dtype=torch.bool)
    one[1, L - 2] = True
    adv = torch.zeros(B, L)
    adv[1, L - 2] = 1.0
    dp = sgd_prob_change(model, ids, one, adv, pi_old, lr=1e-2)
    assert dp[1, L - 2] > 0 and dp[~one].abs().max() == 0
    frac = rise_fraction(dp, adv, pi_old, one)
    b = int(prob_bins(pi_old[1, L - 2]))
    assert frac[b] == 1 and torch.isnan(frac[[i for i in range(N_BINS) if i != b]]).all()


def test_update_selection_only_moves_through_the_kept_bins(batch):
    """Updating only a bin whose advantages are all zero moves nothing (Fig. 1 (e)/(f) select)."""
    model, ids, mask, adv, pi_old = batch
    bins = prob_bins(pi_old)
    adv_no_low = torch.where(bins == 0, 0.0, adv)
    assert sgd_prob_change(model, ids, mask, adv_no_low, pi_old, 1.0, "lowest").abs().max() == 0
    assert sgd_prob_change(model, ids, mask, adv_no_low, pi_old, 1.0, "highest").abs().max() > 0
    d = prob_change_by_bin(model, ids, mask, adv, pi_old, lr=1.0, update="all")
    assert d.shape == (N_BINS,) and torch.isfinite(d).all()


def test_sequential_passes_lopti_L5(batch):
    """One selection = the plain step; Lopti's passes keep pi_old fixed, so a first pass with zero
    advantages leaves the second pass exactly a single step; the order matters otherwise."""
    model, ids, mask, adv, pi_old = batch
    plain = sgd_prob_change(model, ids, mask, adv, pi_old, lr=0.5)
    assert torch.equal(sequential_prob_change(model, ids, mask, adv, pi_old, 0.5, [mask]), plain)
    low, high = pi_old < 0.5, pi_old >= 0.5
    adv_high = torch.where(low, 0.0, adv)
    two = sequential_prob_change(model, ids, mask, adv_high, pi_old, 0.5, [low, high])
    one = sequential_prob_change(model, ids, mask, adv_high, pi_old, 0.5, [high])
    assert torch.equal(two, one)
    fwd = sequential_prob_change(model, ids, mask, adv, pi_old, 0.5, [low, high])
    rev = sequential_prob_change(model, ids, mask, adv, pi_old, 0.5, [high, low])
    assert not torch.equal(fwd, rev) and (fwd - plain).abs().max() > 0
    with pytest.raises(ValueError, match="selections must be a non-empty list"):
        sequential_prob_change(model, ids, mask, adv, pi_old, 0.5, [])
    with pytest.raises(ValueError, match=r"selections\[0\] has shape"):
        sequential_prob_change(model, ids, mask, adv, pi_old, 0.5, [mask[:, 1:]])


def test_rise_fraction_and_bin_means_by_hand():
    pi_old = torch.tensor([[0.1, 0.2, 0.4, 0.9, 0.95, 0.6]])
    dp = torch.tensor([[0.01, -0.02, 0.03, 0.0, 0.01, -0.5]])
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, -1.0]])
    mask = torch.ones(1, 6, dtype=torch.bool)
    frac = rise_fraction(dp, adv, pi_old, mask)
    assert frac[0] == 0.5 and frac[1] == 1.0 and torch.isnan(frac[2]) and frac[3] == 0.5
    means = bin_means(dp, pi_old, mask)
    expected = torch.tensor([-0.005, 0.03, -0.5, 0.005], dtype=torch.float64)
    torch.testing.assert_close(means, expected)


@pytest.mark.parametrize("change, match", [
    (dict(ids=torch.zeros(B, L)), "input_ids must be integer"),
    (dict(ids=torch.full((B, L), V)), r"input_ids must lie in \[0, 128\)"),
    (dict(mask=torch.ones(B, L, dtype=torch.bool)), "mask must be False at position 0"),
    (dict(mask=torch.zeros(B, L, dtype=torch.bool)), "mask selects no element"),
    (dict(adv=torch.full((B, L), float("nan"))), "adv contains"),
    (dict(adv=torch.zeros(B, L - 1)), "adv has shape"),
    (dict(pi_old=torch.full((B, L), 1.5)), r"pi_old must lie in \[0, 1\]"),
    (dict(pi_old=torch.zeros(B, L)), "pi_old must be > 0"),
])
def test_bad_input_raises(batch, change, match):
    model, ids, mask, adv, pi_old = batch
    args = {**dict(ids=ids, mask=mask, adv=adv, pi_old=pi_old), **change}
    with pytest.raises(ValueError, match=match):
        bin_grad_norms(model, args["ids"], args["mask"], args["adv"], args["pi_old"])


def test_bad_step_arguments_raise(batch):
    model, ids, mask, adv, pi_old = batch
    with pytest.raises(ValueError, match="update must be one of"):
        sgd_prob_change(model, ids, mask, adv, pi_old, 0.1, update="middle")
    with pytest.raises(ValueError, match="lr must be"):
        sgd_prob_change(model, ids, mask, adv, pi_old, -0.1)


def test_fused_sequence_logp_equals_sequence_logp():
    """The fused head's log-probs and their gradient equal the full logits' (the reference) to
    float32 rounding: 1e-5 absolute on log-probs of magnitude ~5, 1e-4 relative on gradients."""
    from tailtheory.core.models import tiny_lm
    from tailtheory.lopti.probes import fused_sequence_logp, sequence_logp

    model = tiny_lm(vocab_size=300, hidden=32, layers=1, heads=2, kv_heads=1, seed=3)
    ids = torch.randint(0, 300, (3, 11), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids, dtype=torch.bool)
    attn[1, :3] = False                                      # left padding
    w = torch.randn(3, 11, generator=torch.Generator().manual_seed(1))
    params = list(model.parameters())
    out = {}
    for name, fn in (("full", sequence_logp), ("fused", fused_sequence_logp)):
        lp = fn(model, ids, attn)
        out[name] = (lp.detach(), torch.autograd.grad((lp * w).sum(), params))
    torch.testing.assert_close(out["fused"][0], out["full"][0], rtol=0, atol=1e-5)
    assert (out["fused"][0][:, 0] == 0).all()
    for a, b in zip(out["fused"][1], out["full"][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
