"""LOPTI's one-step measurement on one batch (tailtheory.lopti.onestep): claims L1, L4, L5.

The chunked fast path equals the probes of ``tailtheory.lopti.probes`` (the slow reference), and
a batch is the trainer's own rollout of that step.
"""

import math

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.lopti import onestep as ob
from tailtheory.lopti.probes import (N_BINS, bin_grad_norms, prob_bins, sequence_logp,
                                      sequential_prob_change, sgd_prob_change)
from tailtheory.lopti.reweight import advantage_reweight, lopti_passes

V, B, L = 128, 6, 9
LR = 0.5


@pytest.fixture(scope="module")
def model_batch():
    """A tiny LM, ragged responses (row 1 ends early), pi_old spread over all four bins."""
    model = tiny_lm(vocab_size=V, hidden=32, layers=1, heads=2, kv_heads=1, seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(40.0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, L), generator=g)
    with torch.no_grad():  # half the response tokens are the model's top choice (high pi)
        for t in range(L - 5, L):
            top = model(input_ids=ids[:, :t]).logits[:, -1].argmax(-1)
            ids[:, t] = torch.where(torch.arange(B) % 2 == 0, top, ids[:, t])
    mask = torch.zeros(B, L, dtype=torch.bool)
    mask[:, L - 5:] = True
    mask[1, -2:] = False
    with torch.no_grad():
        pi = torch.where(mask, sequence_logp(model, ids).exp().double(), 1.0)
    adv = torch.randn(B, L, generator=g) * mask
    return model, ob.ProbeBatch(ids, torch.ones(B, L, dtype=torch.bool), mask, adv, pi)


def test_batch_covers_every_bin(model_batch):
    _, pb = model_batch
    assert set(prob_bins(pb.pi_old)[pb.mask].tolist()) == set(range(N_BINS))


def test_chunks_cover_every_row_once_and_every_response_token():
    mask = torch.zeros(5, 7, dtype=torch.bool)
    mask[0, 2:4], mask[1, 2:7], mask[3, 2:3] = True, True, True
    chunks = ob._chunks(mask, 2)
    assert sorted(torch.cat([i for i, _ in chunks]).tolist()) == list(range(5))
    for idx, w in chunks:
        assert not mask[idx, w:].any()
    assert [w for _, w in chunks] == [1, 4, 7]  # ends: rows 2, 4: 1 (empty); 3: 3, 0: 4; 1: 7


def test_surrogate_grads_equal_probes_bin_gradients_L4(model_batch):
    """The chunked gradient of each bin's surrogate is the probes' one (slow reference)."""
    from tailtheory.lopti.probes import bin_gradients

    model, pb = model_batch
    bins = prob_bins(pb.pi_old)
    fast = ob.surrogate_grads(model, pb, [(pb.adv, bins == b) for b in range(N_BINS)], 2)
    _, ref = bin_gradients(model, pb.input_ids, pb.mask, pb.adv, pb.pi_old)
    torch.testing.assert_close(torch.stack(fast), ref, rtol=1e-4, atol=1e-6)


def test_update_probes_equal_probes_reference_L4_L5(model_batch):
    """Every Delta pi and norm of update_probes equals the probes' own step (slow reference)."""
    model, pb = model_batch
    args = (model, pb.input_ids, pb.mask)
    norms, delta = ob.update_probes(model, pb, LR, alpha=0.3, eta=0.5, chunk_rows=2)
    ref_all, ref_bins = bin_grad_norms(*args, pb.adv, pb.pi_old)
    torch.testing.assert_close(norms["all"], ref_all, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(norms["bins"], ref_bins, rtol=1e-5, atol=1e-7)
    for u in ("all", "lowest", "highest"):
        ref = sgd_prob_change(*args, pb.adv, pb.pi_old, LR, u)
        torch.testing.assert_close(delta[u], ref.double(), atol=2e-6, rtol=0)
    ar = advantage_reweight(pb.adv.double(), pb.pi_old.log(), 0.3).float()
    torch.testing.assert_close(delta["AR"], sgd_prob_change(*args, ar, pb.pi_old, LR).double(),
                               atol=2e-6, rtol=0)
    (_, low), (_, high) = lopti_passes(pb.pi_old.log(), pb.mask, 0.5)
    ref = sequential_prob_change(*args, pb.adv, pb.pi_old, LR, [low, high])
    torch.testing.assert_close(delta["Lopti"], ref.double(), atol=2e-6, rtol=0)
    assert delta["all"][pb.mask].abs().max() > 1e-3  # the comparison is not between zeros


def test_zero_advantages_move_nothing_L4(model_batch):
    model, pb = model_batch
    zero = ob.ProbeBatch(pb.input_ids, pb.attention_mask, pb.mask, pb.adv * 0, pb.pi_old)
    norms, delta = ob.update_probes(model, zero, LR)
    assert norms["all"] == 0 and (norms["bins"] == 0).all()
    assert all((d == 0).all() for d in delta.values())


def test_token_grad_norms_against_autograd_and_S4_L1(model_batch):
    """Parameter norm = ||grad log pi(y_t)|| from a full-batch forward; the logit-space norm
    lies in S4's interval [1 - p, sqrt(2) (1 - p)]."""
    model, pb = model_batch
    rows, cols = torch.tensor([0, 0, 3, 5]), torch.tensor([4, 8, 6, 7])
    param, logit = ob.token_grad_norms(model, pb, rows, cols)
    params = list(model.parameters())
    for i, (r, t) in enumerate(zip(rows.tolist(), cols.tolist())):
        with torch.enable_grad():
            lp = sequence_logp(model, pb.input_ids, pb.attention_mask)[r, t]
            g = torch.autograd.grad(lp, params, allow_unused=True)
        ref = math.sqrt(sum(float((x ** 2).sum()) for x in g if x is not None))
        assert param[i] == pytest.approx(ref, rel=1e-4)
    q = 1 - pb.pi_old[rows, cols].float()
    assert ((logit >= q * (1 - 1e-4)) & (logit <= math.sqrt(2) * q * (1 + 1e-4))).all()


def test_batch_stats_counts_are_the_bins(model_batch):
    model, pb = model_batch
    st = ob.batch_stats(model, pb, LR, l1_per_bin=2)
    bins = prob_bins(pb.pi_old)[pb.mask]
    assert st["count"] == torch.bincount(bins, minlength=N_BINS).double().tolist()
    assert st["tokens"] == int(pb.mask.sum()) == sum(st["count"])
    assert all(p + n <= c for p, n, c in zip(st["count_pos"], st["count_neg"], st["count"]))
    assert all(0 <= r <= c for m in ob.METHODS for r, c in zip(st["rise"][m], st["count_pos"]))
    assert len(st["l1"]["p"]) == 2 * N_BINS  # every bin here holds >= 2 tokens


def test_probe_batch_is_the_trainers_rollout_of_that_step():
    """The batch holds the responses the trainer samples at step ``index`` (same problems, same
    generator), and pi_old is 1 / the advantage 0 off the response tokens."""
    from dataclasses import replace

    from tailtheory.engine.rollout.engine import RolloutEngine
    from tailtheory.engine.load import load_model
    from tailtheory.engine.trainer import rollout_config, rollout_step
    from tests.lopti.test_measurement import DenseKK, tiny_config

    cfg, task = tiny_config(), DenseKK()
    model = load_model(cfg, task)
    c = replace(cfg, seed=1)
    new = lambda: (RolloutEngine(model, rollout_config(c, task)),  # noqa: E731
                   torch.Generator().manual_seed(1))
    pb = ob.probe_batch(model, task, c, *new(), index=2)
    _, rb, _ = rollout_step(2, c, task, model, *new())
    assert torch.equal(pb.input_ids, rb.input_ids)
    assert torch.equal(pb.mask[:, rb.prompt_len:], rb.mask) and not pb.mask[:, :rb.prompt_len].any()
    assert (pb.pi_old[~pb.mask] == 1).all() and (pb.adv[~pb.mask] == 0).all()
    assert (pb.adv != 0).any()


def test_fused_head_equals_full_head_L1_L4_L5(model_batch):
    """The fused LM head (no (B, L, V) logits) gives the reference's numbers to float32 rounding:
    norms to 1e-4 relative, summed Delta pi to 1e-5 absolute (each Delta pi is a difference of
    float32 probabilities), rise counts to one token in a bin (a Delta pi near 0 may change
    sign), L1's norms to 1e-4 relative."""
    model, pb = model_batch
    full = ob.batch_stats(model, pb, LR, 2, torch.Generator().manual_seed(0), head="full")
    fused = ob.batch_stats(model, pb, LR, 2, torch.Generator().manual_seed(0), head="fused")
    assert fused["count"] == full["count"] and fused["adv_sum_pos"] == full["adv_sum_pos"]
    assert fused["norm_all"] == pytest.approx(full["norm_all"], rel=1e-4)
    assert fused["norm_bins"] == pytest.approx(full["norm_bins"], rel=1e-4)
    for u in ob.UPDATE_BINS:
        for g in ("pos", "neg"):
            assert fused["dpi_sum"][u][g] == pytest.approx(full["dpi_sum"][u][g], abs=1e-5)
    for m in ob.METHODS:
        assert all(abs(a - b) <= 1 for a, b in zip(fused["rise"][m], full["rise"][m]))
    assert fused["l1"]["p"] == full["l1"]["p"]
    for k in ("param_norm", "logit_norm"):
        assert fused["l1"][k] == pytest.approx(full["l1"][k], rel=1e-4)


def test_unknown_head_is_refused(model_batch):
    model, pb = model_batch
    with pytest.raises(ValueError, match="head must be one of"):
        ob.chunked_probs(model, pb, head="sparse")
