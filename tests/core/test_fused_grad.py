"""The pieces of the fused LM head's backward (``tailtheory.core.fused_grad``): tiles, the safe
set on a tile, and the log-prob's gradient against autograd on the full logits."""

import math

import pytest
import torch

from tailtheory.core.fused_grad import (TOKEN_TILE, Head, SafeSet, at_least, check_tiles,
                                        logp_backward, tiles)

CPU = torch.device("cpu")


def test_tiles_cover_the_range_once():
    assert [(s.start, s.stop) for s in tiles(7, 3)] == [(0, 3), (3, 6), (6, 7)]
    assert list(tiles(0, 4)) == []


def test_check_tiles_defaults_and_errors():
    assert check_tiles(None, None, 100, CPU) == (TOKEN_TILE, 100)   # capped at V
    assert check_tiles(4, 8, 100, CPU) == (4, 8)
    with pytest.raises(ValueError, match="larger than the vocabulary"):
        check_tiles(4, 101, 100, CPU)
    with pytest.raises(ValueError, match="token_tile"):
        check_tiles(0, 8, 100, CPU)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_at_least_is_greater_or_equal_at_the_dtypes_rounding(dtype):
    thr = math.log(1e-4)
    t = torch.tensor(thr, dtype=dtype)
    d = torch.stack([t, torch.nextafter(t, torch.tensor(-math.inf, dtype=dtype)), t + 1])
    assert at_least(d.clone(), thr).tolist() == (d >= thr).to(dtype).tolist() == [1.0, 0.0, 1.0]


def test_min_p_safe_set_keeps_the_sampled_token():
    z = torch.tensor([[0.0, -1.0, -20.0, -30.0]], dtype=torch.float64)
    safe = SafeSet("min_p", 1e-3, r1=z.max(-1).values)
    ind = safe.select(slice(0, 1), slice(0, 4), z, torch.tensor([3]), torch.float64)
    assert ind.tolist() == [[1.0, 1.0, 0.0, 1.0]]        # e^-20 < 1e-3 pruned; token 3 kept
    assert SafeSet().select(slice(0, 1), slice(0, 4), z, torch.tensor([3]), z.dtype) is None


@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_logp_backward_equals_autograd_across_tiles(tau):
    g = torch.Generator().manual_seed(0)
    N, H, V = 7, 5, 12
    h, W, b = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((N, H), (V, H), (V,)))
    k, w = torch.randint(V, (N,), generator=g), torch.randn(N, generator=g, dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (h, W, b)]
    z = (leaves[0] @ leaves[1].T + leaves[2]) / tau
    (w * torch.log_softmax(z, -1).gather(1, k[:, None])[:, 0]).sum().backward()
    zd = z.detach()
    m = zd.max(-1).values
    norm = (m, torch.logsumexp(zd - m[:, None], -1))
    dh, dW, db = logp_backward(Head(h, W, b, tau), None, SafeSet(), k, norm, w, 3, 5,
                               (True, True, True))
    for got, leaf in zip((dh, dW, db), leaves):
        torch.testing.assert_close(got, leaf.grad, rtol=1e-12, atol=1e-12)
