"""LOPTI Figure 1 / Figure 3 measurement (tailtheory.lopti.figure1): claims L1, L4, L5.

The chunked fast path equals the probes of ``tailtheory.lopti.probes`` (the slow reference);
pooling, verdicts and the stored measurement are checked on hand-made numbers.
"""

import math

import numpy as np
import pytest
import torch

from tailtheory.core.measurements import StaleMeasurement, save_measurement
from tailtheory.core.models import tiny_lm
from tailtheory.core.registry import Verdict
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.tasks import Reward, get_task
from tailtheory.engine.trainer import load_model
from tailtheory.lopti import figure1 as f1
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
    return model, f1.ProbeBatch(ids, torch.ones(B, L, dtype=torch.bool), mask, adv, pi)


def test_batch_covers_every_bin(model_batch):
    _, pb = model_batch
    assert set(prob_bins(pb.pi_old)[pb.mask].tolist()) == set(range(N_BINS))


def test_chunks_cover_every_row_once_and_every_response_token():
    mask = torch.zeros(5, 7, dtype=torch.bool)
    mask[0, 2:4], mask[1, 2:7], mask[3, 2:3] = True, True, True
    chunks = f1._chunks(mask, 2)
    assert sorted(torch.cat([i for i, _ in chunks]).tolist()) == list(range(5))
    for idx, w in chunks:
        assert not mask[idx, w:].any()
    assert [w for _, w in chunks] == [1, 4, 7]  # ends: rows 2, 4: 1 (empty); 3: 3, 0: 4; 1: 7


def test_surrogate_grads_equal_probes_bin_gradients_L4(model_batch):
    """The chunked gradient of each bin's surrogate is the probes' one (slow reference)."""
    from tailtheory.lopti.probes import bin_gradients

    model, pb = model_batch
    bins = prob_bins(pb.pi_old)
    fast = f1.surrogate_grads(model, pb, [(pb.adv, bins == b) for b in range(N_BINS)], 2)
    _, ref = bin_gradients(model, pb.input_ids, pb.mask, pb.adv, pb.pi_old)
    torch.testing.assert_close(torch.stack(fast), ref, rtol=1e-4, atol=1e-6)


def test_update_probes_equal_probes_reference_L4_L5(model_batch):
    """Every Delta pi and norm of update_probes equals the probes' own step (slow reference)."""
    model, pb = model_batch
    args = (model, pb.input_ids, pb.mask)
    norms, delta = f1.update_probes(model, pb, LR, alpha=0.3, eta=0.5, chunk_rows=2)
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
    zero = f1.ProbeBatch(pb.input_ids, pb.attention_mask, pb.mask, pb.adv * 0, pb.pi_old)
    norms, delta = f1.update_probes(model, zero, LR)
    assert norms["all"] == 0 and (norms["bins"] == 0).all()
    assert all((d == 0).all() for d in delta.values())


def test_token_grad_norms_against_autograd_and_S4_L1(model_batch):
    """Parameter norm = ||grad log pi(y_t)|| from a full-batch forward; the logit-space norm
    lies in S4's interval [1 - p, sqrt(2) (1 - p)]."""
    model, pb = model_batch
    rows, cols = torch.tensor([0, 0, 3, 5]), torch.tensor([4, 8, 6, 7])
    param, logit = f1.token_grad_norms(model, pb, rows, cols)
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
    st = f1.batch_stats(model, pb, LR, l1_per_bin=2)
    bins = prob_bins(pb.pi_old)[pb.mask]
    assert st["count"] == torch.bincount(bins, minlength=N_BINS).double().tolist()
    assert st["tokens"] == int(pb.mask.sum()) == sum(st["count"])
    assert all(p + n <= c for p, n, c in zip(st["count_pos"], st["count_neg"], st["count"]))
    assert all(0 <= r <= c for m in f1.METHODS for r, c in zip(st["rise"][m], st["count_pos"]))
    assert len(st["l1"]["p"]) == 2 * N_BINS  # every bin here holds >= 2 tokens


# ---- hand-made measurements: pooling and verdicts --------------------------------------------

def fake_batch(seed: int, batch: int, norm_bins, rise_top: dict, dpi_scale=(1.0, 0.1),
               rho_sign: float = 1.0) -> dict:
    """A stored batch with 10 tokens per bin, 5 with A > 0 and 5 with A < 0; the A > 0 tokens
    of the top bin rose ``5 * rise_top[m]`` times; Delta pi per bin is ``(4 - b) * 1e-3``
    (times ``dpi_scale`` for lowest / highest); L1 norms are ``(1 - p) ** rho_sign``."""
    base = [(N_BINS - b) * 1e-3 for b in range(N_BINS)]
    sums = lambda k, s: {"pos": [5 * k * x for x in s], "neg": [-5 * k * x for x in s]}  # noqa
    p = [0.1, 0.4, 0.6, 0.9, 0.2, 0.3, 0.7, 0.99]
    return {"seed": seed, "batch": batch, "tokens": 10 * N_BINS, "count": [10.0] * N_BINS,
            "count_pos": [5.0] * N_BINS, "count_neg": [5.0] * N_BINS,
            "adv_sum_pos": [5.0] * N_BINS, "adv_sum_neg": [-5.0] * N_BINS,
            "norm_all": 1.0, "norm_bins": list(norm_bins),
            "dpi_sum": {"all": sums(1, base), "lowest": sums(dpi_scale[0], base),
                        "highest": sums(dpi_scale[1], base)},
            "rise": {m: [2.5, 2.5, 2.5, 5 * rise_top[m]] for m in f1.METHODS},
            "l1": {"p": p, "param_norm": [(1 - x) ** rho_sign for x in p],
                   "logit_norm": [1 - x for x in p]}}


def fake_data(jitter=(0.0, 0.2, 0.4), **kw) -> dict:
    rise = lambda j: {"GRPO": 0.5 + j / 10, "AR": 0.7 + j / 10, "Lopti": 0.4 + j / 10}  # noqa
    norms = lambda j: [0.7 + j / 10, 0.4 + j / 10, 0.2 + j / 10, 0.1 + j / 10]  # noqa
    batches = [fake_batch(s, i, norms(j), rise(j), **kw) for s, j in enumerate(jitter)
               for i in range(2)]
    return {"seeds": list(range(len(jitter))), "batches": batches}


def test_seed_values_pool_hand_made_numbers():
    sv = f1.seed_values(fake_data())
    assert np.allclose(sv[0]["frac"], 0.25) and np.allclose(sv[1]["adv_pos"], 1.0)
    assert np.allclose(sv[2]["norm_bins"], [0.74, 0.44, 0.24, 0.14])
    assert np.allclose(sv[0]["dpi"]["all"]["pos"], [4e-3, 3e-3, 2e-3, 1e-3])
    assert np.allclose(sv[1]["rise"]["AR"], [0.5, 0.5, 0.5, 0.72])
    assert sv[0]["l1"]["rho"] == pytest.approx(1.0) and sv[0]["l1"]["slope"] == pytest.approx(1.0)


def test_verdicts_on_hand_made_numbers_L1_L4_L5():
    """Seeds differ by a common shift, so every difference has se 0 (or a known se)."""
    data = fake_data()
    assert f1.l1_evidence(data).verdict == Verdict.TOY_SCALE
    assert f1.l1_evidence(fake_data(rho_sign=-1.0)).verdict == Verdict.REFUTED
    e4 = f1.l4_evidence(data)
    assert e4.verdict == Verdict.TOY_SCALE and e4.numbers["f_rel_size"] == pytest.approx(0.1)
    assert e4.numbers["e_rel_dist"] == pytest.approx(0.0)
    assert f1.l4_evidence(fake_data(dpi_scale=(0.0, 2.0))).verdict == Verdict.REFUTED
    e5 = f1.l5_evidence(data)  # AR +0.2 over GRPO, Lopti -0.1: one part refuted
    assert e5.numbers["delta_AR"] == pytest.approx(0.2) and e5.verdict == Verdict.REFUTED
    assert e5.numbers["rise_top_GRPO"] == pytest.approx(0.52)


def test_plots_return_figure_and_table():
    import matplotlib.pyplot as plt

    fig, table = f1.plot_figure1(fake_data())
    assert len(fig.axes) == 6 and {"seed", "quantity", "bin", "value"} <= set(table.columns)
    fig3, t3 = f1.plot_figure3(fake_data())
    assert set(t3["quantity"]) == {f"rise_{m}" for m in f1.METHODS}
    plt.close(fig)
    plt.close(fig3)


# ---- bad input and the stored measurement ---------------------------------------------------

def test_bad_preset_and_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="unknown preset"):
        f1.measure_probes("medium")
    with pytest.raises(ValueError, match="unknown preset"):
        f1.notebook_probe_data("thorough")
    with pytest.raises(ValueError, match=">= 2 distinct seeds"):
        f1.measure_probes("quick", seeds=(0,))
    with pytest.raises(ValueError, match=">= 2 distinct seeds"):
        f1.measure_probes("quick", seeds=(3, 3))
    with pytest.raises(ValueError, match="seeds must be"):
        f1.measure_probes("quick", seeds=(0, -1))
    with pytest.raises(ValueError, match="batches"):
        f1.measure_probes("quick", batches=0)
    with pytest.raises(ValueError, match=">= 2 seeds"):
        f1.l4_evidence({"seeds": [0], "batches": fake_data()["batches"][:1]})


class DenseKK:
    """``kk`` (2 people) with a dense reward: the first response token id mod 3, so groups of
    a random model rarely tie and the advantages are non-zero."""

    def __init__(self):
        self._task = get_task("kk", seed=0, n_people=2)

    def __getattr__(self, name):
        return getattr(self._task, name)

    def reward(self, problem, response_ids) -> Reward:
        return Reward(float(int(response_ids[0]) % 3), False, True)


def test_measure_end_to_end_on_a_tiny_model():
    cfg = TrainConfig(task="kk", model="tiny", n_people=2, prompts_per_step=2, group_size=3,
                      method="grpo")
    task = DenseKK()
    model = load_model(cfg, task)
    data = f1.measure(model, task, cfg, seeds=(0, 1), batches=1, progress=False)
    assert data["seeds"] == [0, 1] and [r["seed"] for r in data["batches"]] == [0, 1]
    assert all(r["norm_all"] > 0 for r in data["batches"])
    again = f1.measure(model, task, cfg, seeds=(0, 1), batches=1, progress=False)
    assert again == data  # seeded: the same batches, the same numbers
    with pytest.raises(ValueError, match=">= 2 distinct seeds"):
        f1.measure(model, task, cfg, seeds=[0], batches=1)


def test_stored_measurement_round_trip_and_stale_one_refused(tmp_path, monkeypatch):
    from tailtheory.core.registry import all_claims

    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    with pytest.raises(StaleMeasurement, match="no stored measurement"):
        f1.probe_data("quick")
    data = fake_data()
    save_measurement("lopti_probes", f1.probe_config("full"), data, f1.COMMAND)
    assert f1.probe_data("quick") == data
    assert all_claims()["L4"].check("quick").verdict == Verdict.TOY_SCALE
    stale = {**f1.probe_config("full"), "lr": 2 * f1.SGD_LR}
    save_measurement("lopti_probes", stale, data, f1.COMMAND)
    with pytest.raises(StaleMeasurement, match="another config"):
        f1.probe_data("quick")
