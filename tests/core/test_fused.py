"""The fused LM head against the full-logits reference (tailtheory.core.fused).

Claims touched: S1 (the custom backward is ``(e_k - pi) / tau`` folded into ``dh``, ``dW``),
S2/S3 (sum p^2), P1/P3 (pruned mass, pruned log-prob), T12 (token KL rollout || train).
Every statistic and gradient is checked against ``naive_fused_token_stats`` (``h W^T + b`` in
full, then ``naive_token_stats``), across tile boundaries, ragged masks and every pruning rule.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import vocab_sizes
from tailtheory.core.fused import fused_token_stats, naive_fused_token_stats
from tailtheory.core.fused_grad import VOCAB_TILE, VOCAB_TILE_THREADED
from tailtheory.core.stats import token_stats

RTOL_F64, ATOL_F64 = 1e-12, 1e-12
"""float64: fused and full-logits code agree to rounding (observed worst ~1e-14)."""
RTOL_F32, ATOL_F32 = 1e-5, 2e-5
"""float32 on the fixed cases below (logits |z| <~ 20): the tolerance of tests/core/test_stats.py
(observed worst here ~5e-6: the tiled and the full matrix product round differently)."""
F32_LOGIT_ULPS = 32
"""float32 on generated inputs, logits up to |z| ~ 300: the tiled and the full matrix product
round each logit differently, by a few ``eps_f32 |z|``, and every statistic and gradient inherits
that relative error. So the tolerance is ``F32_LOGIT_ULPS * eps_f32 * max(1, max|z|)`` times
``max(1, max|reference|)``, normwise: an entry of ``dW`` that cancels to ~0 from terms of size
``|h|`` keeps their absolute error, so no elementwise relative tolerance can hold. Observed worst
over ~1,900 examples, fused against the float32 reference and against float64: 13 units (``dh``);
the float32 reference itself is up to 8 units off float64."""
EPS_F32 = 2.0**-23
BF16_ULP = 2.0**-8
"""bf16's machine epsilon (8 significand bits)."""

pytestmark = pytest.mark.usefixtures("one_thread")


@st.composite
def fused_inputs(draw, dtype=torch.float64, max_v=300, rules=(None, "keep", "min_p", "top_p",
                                                               "absolute"), max_tiles=300):
    """Hidden states, head, tokens, ragged mask, rollout side, safe set, temperature, tiles (at
    most ``max_tiles`` per row, so that large V stays fast; a tile still ends inside a row)."""
    B, T, H = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 12))
    V = draw(vocab_sizes(2, max_v))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 30.0]))
    h = torch.randn(B, T, H, generator=g, dtype=torch.float64) * scale
    W = torch.randn(V, H, generator=g, dtype=torch.float64) / math.sqrt(H)
    b = torch.randn(V, generator=g, dtype=torch.float64) if draw(st.booleans()) else None
    k = torch.randint(0, V, (B, T), generator=g)
    mask = torch.rand(B, T, generator=g) < draw(st.sampled_from([0.0, 0.6, 1.0]))
    kw = dict(mask=mask if draw(st.booleans()) else None,
              temperature=draw(st.sampled_from([1.0, 0.3, 2.0])),
              token_tile=draw(st.integers(1, 7)),
              vocab_tile=draw(st.integers(-(-V // max_tiles), V)))
    if draw(st.booleans()):
        noise = draw(st.sampled_from([0.0, 0.01, 1.0]))
        kw["h_roll"] = (h + noise * torch.randn(B, T, H, generator=g, dtype=torch.float64))
        kw["W_roll"] = W.to(dtype)
    rule = draw(st.sampled_from(rules))
    if rule == "keep":
        keep = torch.rand(B, T, V, generator=g) < draw(st.floats(0.0, 1.0))
        kw["keep"] = keep.scatter_(-1, k.unsqueeze(-1), True)
    elif rule is not None:
        kw["rule"] = rule
        kw["threshold"] = draw(st.sampled_from([0.0, 1e-4, 0.05, 0.3])) if rule != "absolute" \
            else 0.0  # absolute: a threshold above some row's max pi raises (tested below)
    if "h_roll" in kw:
        kw["h_roll"] = kw["h_roll"].to(dtype)
    return h.to(dtype), W.to(dtype), k, None if b is None else b.to(dtype), kw


def _agree(fast: dict, slow: dict, rtol: float, atol: float) -> None:
    assert fast.keys() == slow.keys()
    for name in fast:
        torch.testing.assert_close(fast[name], slow[name], rtol=rtol, atol=atol, msg=name)


def _untiled(kw: dict) -> dict:
    return {n: v for n, v in kw.items() if n not in ("token_tile", "vocab_tile")}


def _grads(fn, h, W, b, k, kw, seed=1):
    """``(dh, dW, db)`` of ``sum_t w_t logp_t`` for random weights ``w``."""
    leaves = [x.detach().clone().requires_grad_() if x is not None else None for x in (h, W, b)]
    w = torch.randn(k.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    logp = fn(leaves[0], leaves[1], k, leaves[2], **kw)["logp"]
    (logp * w.to(logp.dtype)).sum().backward()
    return [None if x is None else x.grad for x in leaves]


@given(fused_inputs())
def test_fused_equals_full_logits_float64(args):
    """S2, S3, P1, T12: every statistic equals the full-logits reference in float64, for every
    rule, tile shape, ragged mask and temperature."""
    h, W, k, b, kw = args
    fast = fused_token_stats(h, W, k, b, **kw)
    assert all(v.dtype == torch.float64 for v in fast.values())
    _agree(fast, naive_fused_token_stats(h, W, k, b, **_untiled(kw)), RTOL_F64, ATOL_F64)


@given(fused_inputs())
def test_fused_gradients_equal_autograd_float64(args):
    """S1: dh, dW, db of the custom backward equal autograd through log_softmax (float64)."""
    h, W, k, b, kw = args
    fast = _grads(fused_token_stats, h, W, b, k, kw)
    slow = _grads(naive_fused_token_stats, h, W, b, k, _untiled(kw))
    for name, f, s in zip(("dh", "dW", "db"), fast, slow):
        if f is not None:
            torch.testing.assert_close(f, s, rtol=RTOL_F64, atol=ATOL_F64, msg=name)


def _logit_scale(h, W, b, kw) -> float:
    """``max(1, max|z|)`` of ``z = (h W^T + b) / tau`` (float64) at the valid positions."""
    z = h.double().reshape(-1, h.shape[-1]) @ W.double().T                # (B*T, V)
    z = (z if b is None else z + b.double()) / kw["temperature"]
    if kw.get("mask") is not None:
        z = z[kw["mask"].reshape(-1)]
    return max(1.0, float(z.abs().max())) if z.numel() else 1.0


def _close_normwise(x, ref, units: float, name: str) -> None:
    """``max|x - ref| <= units * eps_f32 * max(1, max|ref|)`` (see :data:`F32_LOGIT_ULPS`)."""
    tol = units * EPS_F32 * max(1.0, float(ref.abs().max()) if ref.numel() else 1.0)
    err = float((x.double() - ref.double()).abs().max()) if x.numel() else 0.0
    assert err <= tol, f"{name}: max error {err:.3g} > tolerance {tol:.3g}"


@given(fused_inputs(dtype=torch.float32, max_v=2048, rules=(None, "keep"), max_tiles=40))
def test_fused_equals_full_logits_float32(args):
    """float32: values and gradients within :data:`F32_LOGIT_ULPS` of the float32 reference and of
    the float64 one (both compute in float32; as accurate as the full logits). Rules are left to
    the float64 test: a token within float32 rounding of a threshold may fall either side."""
    h, W, k, b, kw = args
    units = F32_LOGIT_ULPS * _logit_scale(h, W, b, kw)
    up = {n: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
          for n, v in _untiled(kw).items()}
    b64 = None if b is None else b.double()
    fast = fused_token_stats(h, W, k, b, **kw)
    slow = naive_fused_token_stats(h, W, k, b, **_untiled(kw))
    exact = naive_fused_token_stats(h.double(), W.double(), k, b64, **up)
    assert fast.keys() == slow.keys() == exact.keys()
    assert all(v.dtype == torch.float32 for v in fast.values())
    for name in fast:
        _close_normwise(fast[name], slow[name], units, name)
        _close_normwise(fast[name], exact[name], units, name + " vs float64")
    grads = zip(("dh", "dW", "db"), _grads(fused_token_stats, h, W, b, k, kw),
                _grads(naive_fused_token_stats, h, W, b, k, _untiled(kw)),
                _grads(naive_fused_token_stats, h.double(), W.double(), b64, k, up))
    for name, f, s, e in grads:
        if f is not None:
            assert f.dtype == torch.float32
            _close_normwise(f, s, units, name)
            _close_normwise(f, e, units, name + " vs float64")


@pytest.mark.parametrize("rule, threshold", [("min_p", 0.01), ("top_p", 0.1),
                                             ("absolute", 1e-3)])
def test_float32_rules_on_a_fixed_case(rule, threshold):
    """Each rule in float32, rollout side on, tiles that cut rows and vocabulary."""
    g = torch.Generator().manual_seed(5)
    h, W = torch.randn(3, 7, 16, generator=g), torch.randn(301, 16, generator=g) / 2
    k = torch.randint(0, 301, (3, 7), generator=g)
    kw = dict(h_roll=h + 0.05 * torch.randn(3, 7, 16, generator=g), W_roll=W, rule=rule,
              threshold=threshold, temperature=0.8)
    fast = fused_token_stats(h, W, k, **kw, token_tile=4, vocab_tile=64)
    _agree(fast, naive_fused_token_stats(h, W, k, **kw), RTOL_F32, ATOL_F32)
    assert fast["pruned_mass"].max() > 0  # the rule really pruned something


def _case(B=2, T=7, H=6, V=37, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, T, H, generator=g, dtype=dtype) * 2
    W = torch.randn(V, H, generator=g, dtype=dtype)
    return h, W, torch.randn(V, generator=g, dtype=dtype), torch.randint(0, V, (B, T), generator=g)


@pytest.mark.parametrize("token_tile, vocab_tile", [(3, 8), (1, 1), (14, 37), (5, 36), (100, 2)])
def test_tile_boundaries_inside_rows(token_tile, vocab_tile):
    """V = 37 and N = 14 are multiples of no tile here but 37/14: a tile ends inside a row."""
    h, W, b, k = _case()
    kw = dict(h_roll=h * 0.9, W_roll=W, rule="min_p", threshold=0.02, temperature=0.7)
    fast = fused_token_stats(h, W, k, b, token_tile=token_tile, vocab_tile=vocab_tile, **kw)
    _agree(fast, naive_fused_token_stats(h, W, k, b, **kw), RTOL_F64, ATOL_F64)


@pytest.mark.parametrize("dtype, rtol, atol", [(torch.float64, RTOL_F64, ATOL_F64),
                                               (torch.float32, RTOL_F32, ATOL_F32)])
def test_top_p_sorts_a_few_rows_at_a_time(monkeypatch, dtype, rtol, atol):
    """top_p's token tile is capped at TOP_P_ELEMENTS // V rows (here 2 of V = 37, against a
    token tile of 5); every pass uses the capped tiles, so the cut found on sorted rows meets
    bitwise the same logits in the main pass and the backward (float32 too)."""
    import tailtheory.core.fused as fused

    monkeypatch.setattr(fused, "TOP_P_ELEMENTS", 2 * 37)
    h, W, b, k = _case(dtype=dtype)
    kw = dict(h_roll=h * 0.9, W_roll=W, rule="top_p", threshold=0.2, temperature=0.7)
    fast = fused_token_stats(h, W, k, b, token_tile=5, vocab_tile=8, **kw)
    _agree(fast, naive_fused_token_stats(h, W, k, b, **kw), rtol, atol)
    assert fast["pruned_mass"].min() > 0
    for f, s in zip(_grads(fused_token_stats, h, W, b, k, {**kw, "vocab_tile": 8}),
                    _grads(naive_fused_token_stats, h, W, b, k, kw)):
        torch.testing.assert_close(f, s, rtol=rtol, atol=atol)


@pytest.mark.parametrize("side", ["h_roll", "W_roll", "both"])
def test_rollout_side_from_hidden_states_or_weights(side):
    """T12: the rollout side given by its hidden states, its head, or both (the missing one is
    this side's), with the rule on it: every statistic equals the full-logits reference."""
    h, W, b, k = _case()
    g = torch.Generator().manual_seed(11)
    roll = {"h_roll": h + 0.2 * torch.randn(h.shape, generator=g, dtype=h.dtype),
            "W_roll": W + 0.1 * torch.randn(W.shape, generator=g, dtype=W.dtype)}
    kw = {n: v for n, v in roll.items() if side in (n, "both")}
    kw.update(rule="min_p", threshold=0.05, temperature=0.8)
    fast = fused_token_stats(h, W, k, b, token_tile=4, vocab_tile=9, **kw)
    full = dict(h_roll=kw.get("h_roll", h), W_roll=kw.get("W_roll", W),
                bias_roll=None if "W_roll" in kw else b)
    slow = naive_fused_token_stats(h, W, k, b, **{**kw, **full})
    _agree(fast, slow, RTOL_F64, ATOL_F64)
    assert fast["kl"].max() > 0 and fast["pruned_mass"].max() > 0  # (S = {k}: kl = 0)


def test_gradcheck_float64():
    """S1 by finite differences: logp in h, W and bias, full and pruned (keep, rollout rule)."""
    h, W, b, k = _case(B=1, T=3, H=4, V=7, seed=2)
    keep = torch.rand(1, 3, 7, generator=torch.Generator().manual_seed(3)) > 0.5
    keep.scatter_(-1, k.unsqueeze(-1), True)
    for kw in (dict(), dict(keep=keep),
               dict(h_roll=h.detach() + 0.3, W_roll=W.detach(), rule="top_p", threshold=0.2)):
        def fn(hh, WW, bb, kw=kw):
            return fused_token_stats(hh, WW, k, bb, temperature=0.7, token_tile=2, vocab_tile=3,
                                     **kw)["logp"]
        leaves = tuple(x.clone().requires_grad_() for x in (h, W, b))
        assert torch.autograd.gradcheck(fn, leaves)


def test_only_logp_carries_a_gradient_and_no_grad_path_agrees():
    h, W, b, k = _case()
    hh = h.clone().requires_grad_()
    st_ = fused_token_stats(hh, W, k, b, h_roll=h, W_roll=W, rule="min_p", threshold=0.1)
    assert st_["logp"].requires_grad
    assert not any(st_[n].requires_grad for n in st_ if n != "logp")
    plain = fused_token_stats(h, W, k, b, h_roll=h, W_roll=W, rule="min_p", threshold=0.1)
    _agree({n: v.detach() for n, v in st_.items()}, plain, 0, 0)


def test_ragged_mask_skips_positions_and_their_gradient():
    """Masked positions read 0, may hold any token id (here -100) and get no gradient."""
    h, W, b, k = _case()
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    k = k.masked_fill(~mask, -100)
    kw = dict(mask=mask, h_roll=h + 0.1, W_roll=W, token_tile=3, vocab_tile=8)
    fast = fused_token_stats(h, W, k, b, **kw)
    assert all((v[~mask] == 0).all() for v in fast.values())
    _agree(fast, naive_fused_token_stats(h, W, k, b, **_untiled(kw)), RTOL_F64, ATOL_F64)
    dh = _grads(fused_token_stats, h, W, b, k, kw)[0]
    assert (dh[~mask] == 0).all() and (dh[mask].abs().sum(-1) > 0).all()
    none = fused_token_stats(h.requires_grad_(), W, k, b, mask=torch.zeros_like(mask))
    assert all((v == 0).all() for v in none.values())
    none["logp"].sum().backward()
    assert (h.grad == 0).all()


def test_qwen_vocabulary_151936_small_T():
    """V = 151,936 (Qwen2.5): 75 vocabulary tiles (10 with several threads), the last a partial
    one, values and gradients."""
    V, g = 151_936, torch.Generator().manual_seed(7)
    h, W = torch.randn(1, 3, 16, generator=g) * 2, torch.randn(V, 16, generator=g) / 4
    k = torch.tensor([[0, V - 1, 77_777]])
    kw = dict(h_roll=h + 0.01, W_roll=W, rule="min_p", threshold=1e-4)
    fast = fused_token_stats(h, W, k, **kw)
    assert V % VOCAB_TILE != 0 and V % VOCAB_TILE_THREADED != 0
    _agree(fast, naive_fused_token_stats(h, W, k, **kw), RTOL_F32, ATOL_F32)
    for f, s in zip(_grads(fused_token_stats, h, W, None, k, kw)[:2],
                    _grads(naive_fused_token_stats, h, W, None, k, kw)[:2]):
        torch.testing.assert_close(f, s, rtol=RTOL_F32, atol=ATOL_F32)


def test_bfloat16_accumulates_in_float32():
    """bf16 inputs: float32 statistics equal to the float32 reference on the same (exactly
    upcast) values; against token_stats of bf16-rounded logits they differ by at most the
    rounding of the logits, |d logp| <= 2 * eps_bf16 * max|z| (each logit moves by <= eps/2 |z|,
    LSE by at most the largest such move; a factor 2 of margin). Gradients come back in bf16."""
    g = torch.Generator().manual_seed(8)
    h = (torch.randn(2, 9, 32, generator=g) * 2).bfloat16()
    W = (torch.randn(700, 32, generator=g) / 4).bfloat16()
    k = torch.randint(0, 700, (2, 9), generator=g)
    fast = fused_token_stats(h, W, k, token_tile=4, vocab_tile=128)
    assert all(v.dtype == torch.float32 for v in fast.values())
    _agree(fast, naive_fused_token_stats(h.float(), W.float(), k), RTOL_F32, ATOL_F32)
    z16 = h @ W.T                                                      # bf16 logits (B, T, V)
    rounded = token_stats(z16, k)
    bound = 2 * BF16_ULP * float(z16.float().abs().max())
    assert float((fast["logp"] - rounded["logp"]).abs().max()) <= bound
    dh, dW, _ = _grads(fused_token_stats, h, W, None, k, dict(token_tile=4, vocab_tile=128))
    rh, rW, _ = _grads(naive_fused_token_stats, h.float(), W.float(), None, k, {})
    assert dh.dtype == dW.dtype == torch.bfloat16
    torch.testing.assert_close(dh.float(), rh, rtol=2 * BF16_ULP, atol=2 * BF16_ULP)
    torch.testing.assert_close(dW.float(), rW, rtol=2 * BF16_ULP, atol=2 * BF16_ULP)


def test_ties_follow_safe_vocab_mask_across_tiles():
    """Exact ties (integer logits): top_p keeps the tied tokens by id, min_p at rho = 1 keeps
    every tied argmax; tiles of 2 split the tie. p(2) = e^2 / (3 e^2 + 3) for tokens 1, 2, 4."""
    W = torch.tensor([[0.0], [2.0], [2.0], [0.0], [2.0], [0.0]], dtype=torch.float64)
    h, k = torch.ones(1, 1, 1, dtype=torch.float64), torch.tensor([[1]])
    p2 = math.exp(2) / (3 * math.exp(2) + 3)
    for rule, thr, mass in (("top_p", 0.5, 1 - 2 * p2), ("min_p", 1.0, 1 - 3 * p2),
                            ("top_p", 0.0, 0.0)):
        fast = fused_token_stats(h, W, k, rule=rule, threshold=thr, vocab_tile=2)
        assert math.isclose(float(fast["pruned_mass"]), mass, rel_tol=0, abs_tol=1e-15)
        _agree(fast, naive_fused_token_stats(h, W, k, rule=rule, threshold=thr), 0, 1e-15)


@given(fused_inputs(rules=("min_p", "top_p", "keep")))
def test_pruned_logp_is_full_logp_minus_kept_log_mass(args):
    """P3 without the reference: log pi_S(k) = log pi(k) - log(1 - m), m the pruned mass."""
    h, W, k, b, kw = args
    pruned = fused_token_stats(h, W, k, b, **kw)
    full_kw = {n: v for n, v in kw.items() if n not in ("keep", "rule", "threshold")}
    full = fused_token_stats(h, W, k, b, **full_kw)
    m = pruned["pruned_mass"]
    ok = m < 0.5  # log1p(-m) loses digits as m -> 1; the float64 test covers those rows
    torch.testing.assert_close(pruned["logp"][ok], (full["logp"] - torch.log1p(-m))[ok],
                               rtol=1e-11, atol=1e-11)


H3, W3, B3, K3 = _case(B=1, T=2, H=3, V=5, dtype=torch.float32)


@pytest.mark.parametrize("kwargs, match", [
    (dict(h=torch.zeros(1, 2, 4)), r"hidden size of h \(4\) does not match the LM head W"),
    (dict(vocab_tile=6), r"vocab_tile=6 is larger than the vocabulary V=5"),
    (dict(vocab_tile=0), "vocab_tile must be >= 1"),
    (dict(token_tile=0), "token_tile must be >= 1"),
    (dict(h=H3.clone().index_fill_(-1, torch.tensor([1]), math.nan)), r"^h contains .*NaN"),
    (dict(h=H3.clone().index_fill_(-1, torch.tensor([1]), math.inf)), r"^h contains .*inf"),
    (dict(W=W3.clone().fill_(math.inf)), r"^W contains"),
    (dict(mask=torch.ones(1, 3, dtype=torch.bool)), "mask has shape"),
    (dict(mask=torch.full((1, 2), 0.5)), "mask must be a bool"),
    (dict(keep=torch.ones(1, 2, 4, dtype=torch.bool)), "keep has shape"),
    (dict(keep=torch.zeros(1, 2, 5, dtype=torch.bool)), "tokens must lie inside .*keep"),
    (dict(keep=torch.ones(1, 2, 5, dtype=torch.bool), rule="min_p"), "either keep .* or rule"),
    (dict(tokens=K3 + 5), r"tokens must lie in \[0, 5\)"),
    (dict(tokens=torch.zeros(1, 3, dtype=torch.long)), "tokens must be integer ids of shape"),
    (dict(h=H3[0]), r"h must have shape \(B, T, H\)"),
    (dict(bias=torch.zeros(4)), r"bias must have shape \(V,\)"),
    (dict(bias_roll=B3), "bias_roll needs W_roll"),
    (dict(h_roll=H3, bias_roll=B3), "bias_roll needs W_roll"),
    (dict(W_roll=W3[:, :2]), r"hidden size of h_roll \(3\) does not match the LM head W_roll"),
    (dict(h_roll=H3[:, :1], W_roll=W3), "h_roll .* must have"),
    (dict(rule="nucleus"), "rule must be None or one of"),
    (dict(rule="top_p", threshold=1.0), "threshold for rule 'top_p'"),
    (dict(rule="absolute", threshold=0.99), "exceeds max_a pi"),
    (dict(temperature=0.0), "temperature must be"),
])
def test_bad_input_raises_naming_the_argument(kwargs, match):
    args = {**dict(h=H3, W=W3, tokens=K3, bias=B3), **kwargs}
    with pytest.raises(ValueError, match=match):
        fused_token_stats(**args)


def test_hidden_forward_and_lm_head_give_the_trainer_forward():
    """The engine's fused path: hidden_forward + lm_head through fused_token_stats equals
    token_stats on full_forward's logits (left-padded rows, a response mask, temperature)."""
    from tailtheory.core.forward import full_forward, hidden_forward, left_pad, lm_head
    from tailtheory.core.models import tiny_lm

    model = tiny_lm(vocab_size=300, hidden=32, layers=1, seed=0)
    ids, attn, _ = left_pad([[5, 6, 7, 8, 9], [10, 11, 12]], pad_id=0, vocab_size=300)
    k, mask = ids[:, 1:], attn[:, 1:]                                     # next tokens (B, T-1)
    W, b = lm_head(model)
    with torch.no_grad():
        z = full_forward(model, ids, attn)[:, :-1]                        # (B, T-1, V)
        h = hidden_forward(model, ids, attn)[:, :-1]                      # (B, T-1, H)
    fast = fused_token_stats(h, W, k, b, mask=mask, temperature=0.7, vocab_tile=64)
    slow = token_stats(z, k, temperature=0.7)
    for name in slow:
        torch.testing.assert_close(fast[name][mask], slow[name][mask], rtol=RTOL_F32,
                                   atol=ATOL_F32, msg=name)


def test_lm_head_refuses_models_whose_logits_are_not_h_W():
    from tailtheory.core.forward import lm_head
    from tailtheory.core.models import tiny_lm

    model = tiny_lm(vocab_size=16, hidden=8, layers=1, heads=2, kv_heads=1)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        lm_head(model)
