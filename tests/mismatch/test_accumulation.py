"""Property tests of tailtheory.mismatch.accumulation: the sequence log-ratio and its drift,
claim M6 (DVP)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tailtheory.mismatch import accumulation as acc
from tailtheory.mismatch import logprob as mm
from tailtheory.mismatch.figures import plot_accumulation

ATOL = 1e-10


# --- M6 -----------------------------------------------------------------------------------------

@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_m6_sequence_log_ratio_is_minus_sum(B, T, seed):
    """M6: log pi_train(y) / pi_infer(y) = -sum_t Delta_t, masked positions excluded."""
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(B, T, 9, generator=g, dtype=torch.float64)
    zi = z + 0.2 * torch.randn(B, T, 9, generator=g, dtype=torch.float64)
    y = torch.randint(0, 9, (B, T), generator=g)
    mask = torch.rand(B, T, generator=g) < 0.7
    pt = torch.softmax(z, -1).gather(-1, y[..., None])[..., 0]
    pi = torch.softmax(zi, -1).gather(-1, y[..., None])[..., 0]
    one = torch.ones_like(pt)
    direct = torch.log(torch.where(mask, pt, one).prod(-1) / torch.where(mask, pi, one).prod(-1))
    Delta = mm.logprob_mismatch(z, zi).gather(-1, y[..., None])[..., 0]
    torch.testing.assert_close(acc.sequence_log_ratio(Delta, mask), direct, atol=ATOL, rtol=1e-12)


def test_m6_drift_follows_tail_tokens_not_sqrt_T():
    """M6: on simulated sequences the drift slope per tail token is ~ -sigma^2/2, sqrt(T) adds
    nothing once the tail count is known."""
    sim = acc.simulate_sequences(600, 64, 32, 0.3, seed=3)
    fit = acc.accumulation_regression(acc.sequence_log_ratio(sim["Delta_tok"], sim["mask"]),
                                     sim["n_tail"].double(), sim["T"].double())
    assert 0.5 < fit["joint/slope_tail"] / (-0.045) < 2 and abs(fit["joint/t_tail"]) > 5
    assert abs(fit["joint/t_sqrt_T"]) < 3


def test_m6_regression_can_see_a_sqrt_T_drift():
    """M6's check can fail: a drift made of sqrt(T) alone is attributed to sqrt(T)."""
    g = torch.Generator().manual_seed(0)
    T = torch.randint(8, 100, (500,), generator=g).double()
    n_tail = (torch.rand(500, generator=g, dtype=torch.float64) * T).floor()
    y = -0.5 * T.sqrt() + 0.1 * torch.randn(500, generator=g, dtype=torch.float64)
    fit = acc.accumulation_regression(y, n_tail, T)
    assert abs(fit["joint/t_sqrt_T"]) > 10 and fit["r2/sqrt_T"] > fit["r2/n_tail"]


def test_m6_identity_check_can_fail(monkeypatch):
    """M6's identity check compares independent sequence log-probs with -sum Delta: exact for
    logprob_mismatch, and large when Delta is computed wrongly (here with the sign flipped)."""
    from tailtheory.mismatch import claims as claims_mismatch

    assert claims_mismatch._m6_identity_err(0.3, seed=9) < claims_mismatch.TOL_IDENTITY
    def wrong(z, z_prime):
        return torch.log_softmax(z, -1) - torch.log_softmax(z_prime, -1)

    monkeypatch.setattr(claims_mismatch.mm, "logprob_mismatch", wrong)
    assert claims_mismatch._m6_identity_err(0.3, seed=9) > 0.1


def test_M6_mask_selects_and_never_weights():
    """M6: a 0/1 float or int mask equals the bool mask; 0.5 is refused, not used as a weight."""
    g = torch.Generator().manual_seed(0)
    D = torch.randn(3, 5, generator=g, dtype=torch.float64)
    m = torch.rand(3, 5, generator=g) < 0.6
    want = acc.sequence_log_ratio(D, m)
    for x in (m.float(), m.long(), m.numpy()):
        torch.testing.assert_close(acc.sequence_log_ratio(D, x), want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="mask must be a bool tensor, or a numeric one"):
        acc.sequence_log_ratio(D, torch.full((3, 5), 0.5))


# --- bad input ----------------------------------------------------------------------------------

def test_bad_shapes_and_sizes_rejected():
    with pytest.raises(ValueError, match="Delta_tok .* and mask"):
        acc.sequence_log_ratio(torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="Delta_tok must have shape"):
        acc.sequence_log_ratio(torch.zeros(3))
    with pytest.raises(ValueError, match="V must be >= 2"):
        acc.simulate_sequences(4, 8, 1, 0.1)


# --- figure -------------------------------------------------------------------------------------

def test_plot_accumulation():
    """M6 figure: (fig, df); sequences with many tail tokens drift further down."""
    import matplotlib.pyplot as plt

    fig, df = plot_accumulation(B=200, T_max=48)
    assert set(df.group) == {"many tail tokens", "few tail tokens"}
    last = df.dropna().groupby("group")["mean"].last()
    assert last["many tail tokens"] < last["few tail tokens"] < 0.5
    plt.close(fig)
