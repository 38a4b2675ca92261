"""Tests of tailtheory.lopti.text_probe: LOPTI's one-step probes (L1, L4, L5) on a text batch
of any checkpoint, through the fused LM head."""

import pytest
import torch

from tailtheory.core.models import tiny_lm
from tailtheory.lopti import onestep as ob
from tailtheory.lopti.figures import plot_figure1, plot_figure3
from tailtheory.lopti.measurement import seed_values
from tailtheory.lopti.probes import N_BINS, sequence_logp
from tailtheory.lopti.text_probe import gradient_probe, text_batch

V, B, L = 96, 5, 12


@pytest.fixture(scope="module")
def model_ids():
    model = tiny_lm(vocab_size=V, hidden=32, layers=1, heads=2, kv_heads=1, seed=1)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30.0)          # a head and a tail
    ids = torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # every other token of rows 0, 2, 4 is the model's top choice
        for t in range(2, L, 2):
            top = model(input_ids=ids[:, :t]).logits[:, -1].argmax(-1)
            ids[:, t] = torch.where(torch.arange(B) % 2 == 0, top, ids[:, t])
    return model, ids


def test_text_batch_L4(model_ids):
    """pi_old is the model's own probability of each token (the reference's, to float32
    rounding); advantages are +1 on ceil(B/2) sequences and -1 on the others, 0 at t = 0."""
    model, ids = model_ids
    pb = text_batch(model, ids, seed=4)
    assert not pb.mask[:, 0].any() and pb.mask[:, 1:].all()
    with torch.no_grad():
        ref = sequence_logp(model, ids).double().exp()
    torch.testing.assert_close(pb.pi_old[:, 1:], ref[:, 1:], rtol=1e-4, atol=0)
    assert (pb.pi_old[:, 0] == 1).all()
    signs = pb.adv[:, 1]
    assert sorted(signs.tolist()) == [-1.0] * (B // 2) + [1.0] * (B - B // 2)
    assert (pb.adv == signs[:, None] * pb.mask).all()
    assert any(not torch.equal(text_batch(model, ids, seed=s).adv, pb.adv)   # the seed decides
               for s in range(5, 9))


def test_gradient_probe_is_batch_stats_on_the_text_batch_L1_L4_L5(model_ids):
    """The probe is batch_stats of text_batch with the fused head, in the measurement format
    that seed_values pools and the figures draw; the model is left unchanged."""
    model, ids = model_ids
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = gradient_probe(model, ids, seed=2, l1_per_bin=2)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    ref = ob.batch_stats(model, text_batch(model, ids, 2), ob.SGD_LR, 2,
                         torch.Generator().manual_seed(2), head="fused")
    assert data["seeds"] == [2] and data["batches"][0] == {"seed": 2, "batch": 0, **ref}
    st = data["batches"][0]
    assert st["tokens"] == B * (L - 1) and sum(st["count"]) == st["tokens"]
    assert sum(c > 0 for c in st["count"]) >= 2, "the sharpened head spreads pi_old over bins"
    v = seed_values(data)[2]
    assert len(v["norm_bins"]) == N_BINS and v["norm_all"] > 0
    for plot in (plot_figure1, plot_figure3):
        fig, df = plot(data)
        assert len(df) and len(fig.axes) >= 2


def test_bad_input(model_ids):
    model, ids = model_ids
    with pytest.raises(ValueError, match="L >= 2"):
        text_batch(model, ids[:, :1])
