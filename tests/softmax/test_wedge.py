"""Softmax facts through the network, S5 (tailtheory.softmax.wedge): the Jacobian wedge of every
layer of a tiny LM, its fast path against a loop, and the figures' tables."""

import math

import pytest
import torch

from tailtheory.softmax import wedge as sw


# --- S5: the wedge through a tiny transformer -----------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    """A float64 1-layer tiny LM, V = 16 <= H = 32, sharpened head; rows for 4 positions."""
    from tailtheory.core.models import tiny_lm

    model = tiny_lm(vocab_size=16, hidden=32, layers=1, heads=2, kv_heads=1, seed=3).double()
    with torch.no_grad():
        model.lm_head.weight.mul_(sw.S5_SHARPEN)
    ids = torch.randint(16, (4,), generator=torch.Generator().manual_seed(3))
    rows = sw.activation_wedge(model, ids, 3, torch.Generator().manual_seed(4))
    return model, ids, rows


def _loop_reference(model, ids, module, t, k):
    """Slow reference: one sequence, J row by row, the gradient of log p_k by plain autograd."""
    box = {}

    def swap(mod, inp, out):
        box["a"] = out.detach().requires_grad_(True)
        return box["a"]

    h = module.register_forward_hook(swap)
    z = model(input_ids=ids[None]).logits[0, t]  # (V,)
    h.remove()
    J = torch.stack([torch.autograd.grad(z[v], box["a"], retain_graph=True)[0][0, t]
                     for v in range(z.shape[0])])  # (V, H)
    g = torch.autograd.grad(torch.log_softmax(z, -1)[k], box["a"])[0][0, t]
    return J, g


def test_s5_batched_jacobians_match_loop_reference(tiny):
    """S5 fast path (a batch of T copies, one backward) equals the per-position loop."""
    model, ids, rows = tiny
    mods = sw.layer_modules(model)
    L, T, m = len(mods), ids.shape[0], 3
    r = {key: v.reshape(L, T, m) for key, v in rows.items()}
    for li, (_, module) in enumerate(mods):
        for t in range(T):
            J, g = _loop_reference(model, ids, module, t, int(r["k"][li, t, 0]))
            s = torch.linalg.svdvals(J)
            assert r["J_norm"][li, t, 0] == pytest.approx(s[0].item(), rel=1e-9)
            assert r["J_smin"][li, t, 0] == pytest.approx(s[-1].item(), rel=1e-9)
            assert r["grad_norm"][li, t, 0] == pytest.approx(g.norm().item(), rel=1e-9)


def test_s5_every_token_inside_its_wedge(tiny):
    """S5: ||grad_a log p_k|| within [sigma_min sqrt(V/(V-1)), ||J|| sqrt 2] (1-p), every layer;
    the gradient is J^T (e_k - p) up to the float32 casts inside RMSNorm."""
    _, _, rows = tiny
    for s in sw.wedge_summary(rows, 16):
        assert s["frac_inside"] == 1.0
        assert s["upper_ratio_max"] <= 1 + sw.WEDGE_RTOL
        assert s["lower_ratio_min"] >= 1 - sw.WEDGE_RTOL
        assert s["chain_err_max"] < 1e-6
        assert 0 < s["c_lo"] <= s["c_hi"]


def test_s5_wedge_test_can_fail(tiny):
    """Scaling the gradients out of the wedge is caught at both ends."""
    _, _, rows = tiny
    for factor in (1e3, 1e-3):
        bad = dict(rows, grad_norm=rows["grad_norm"] * factor)
        assert min(s["frac_inside"] for s in sw.wedge_summary(bad, 16)) < 1.0


def test_s5_rank_deficient_jacobian_has_upper_end_only():
    """V > H: J cannot have full row rank; sigma_min is reported 0 and only the upper end binds."""
    rows, names = sw.tiny_lm_wedge(vocab_size=48, hidden=16, T=3, n_tokens=2)
    assert (rows["J_smin"] == 0).all() and names[0] == "embed" and names[-1] == "final_norm"
    for s in sw.wedge_summary(rows, 48):
        assert s["frac_inside"] == 1.0 and s["lower_ratio_min"] == math.inf


@pytest.mark.parametrize("ids", [[], [[1, 2], [3, 4]], [0.5, 1.0]])
def test_s5_bad_input_ids_rejected(tiny, ids):
    model, _, _ = tiny
    with pytest.raises(ValueError, match="input_ids"):
        sw.activation_wedge(model, torch.tensor(ids))


def test_s5_leaves_parameter_grads_alone(tiny):
    """Measuring the wedge does not accumulate parameter gradients."""
    model, _, _ = tiny
    assert all(p.grad is None for p in model.parameters())


def test_layer_modules_rejects_other_models():
    with pytest.raises(ValueError, match="Qwen2/Llama-style"):
        sw.layer_modules(torch.nn.Linear(3, 3))


