"""TIM's corrections (``tailtheory/tim/corrections.py``, claim V4) on ``log_rho = log
pi_train - log pi_roll``: token TIS, sequence TIS, MIS, IcePop and the rejections (token,
sequence, geometric). Each formula against a plain-Python loop over its definition, a by-hand
case, and bad inputs raising naming the argument or knob. More by-hand values, through the
registered methods, are in ``tests/engine/test_methods.py``."""

from __future__ import annotations

import math

import pytest
import torch

from tailtheory.tim.corrections import (geo_keep, icepop_keep, icepop_weight, mis_keep,
                                             mis_weight, seq_log_ratio, seq_tis_weight,
                                             tis_weight)

ATOL = 1e-12

NAN_CASES = [
    ("tis_weight", lambda x, m: tis_weight(x, 2.0)),
    ("seq_log_ratio", lambda x, m: seq_log_ratio(x, m, False)),
    ("seq_tis_weight", lambda x, m: seq_tis_weight(x, m, 2.0)),
    ("mis_keep", lambda x, m: mis_keep(x, m, 0.5, 2.0)),
    ("mis_weight", lambda x, m: mis_weight(x, m, 0.5, 2.0)),
    ("geo_keep", lambda x, m: geo_keep(x, m, 0.5, 2.0)),
    ("icepop_keep", lambda x, m: icepop_keep(x, 0.5, 2.0)),
    ("icepop_weight", lambda x, m: icepop_weight(x, 0.5, 2.0)),
]


@pytest.mark.parametrize("name, call", NAN_CASES, ids=[c[0] for c in NAN_CASES])
def test_reject_nan_V4(name, call):
    """A NaN log-ratio (even at a masked position) is an error naming ``log_rho``."""
    x = torch.full((2, 3), -0.5, dtype=torch.float64)
    x[0, 2] = float("nan")
    m = torch.ones(2, 3, dtype=torch.bool)
    m[0, 2] = False
    with pytest.raises(ValueError, match="log_rho"):
        call(x, m)


@pytest.mark.parametrize("call", [
    lambda: seq_log_ratio(torch.zeros(2, 3), torch.ones(3).bool(), False),
    lambda: mis_keep(torch.zeros(2, 3), torch.ones(3).bool(), 0.5, 2.0),
    lambda: mis_weight(torch.zeros(2, 3), torch.ones(3).bool(), 0.5, 2.0),
    lambda: seq_tis_weight(torch.zeros(2, 3), torch.ones(3).bool(), 2.0),
    lambda: geo_keep(torch.zeros(2, 3), torch.ones(3).bool(), 0.5, 2.0),
], ids=["seq_log_ratio", "mis_keep", "mis_weight", "seq_tis_weight", "geo_keep"])
def test_reject_shape_mismatch_V4(call):
    """``mis_keep(log_rho (2, 3), mask (3,))`` raises instead of broadcasting."""
    with pytest.raises(ValueError, match="log_rho"):
        call()


@pytest.mark.parametrize("call, knob", [
    (lambda x, m: tis_weight(x, 0.0), "tis_cap must be > 0"),
    (lambda x, m: tis_weight(x, -1.0), "tis_cap must be > 0"),
    (lambda x, m: seq_tis_weight(x, m, 0.0), "seq_tis_cap must be > 0"),
    (lambda x, m: mis_keep(x, m, 2.0, 2.0), "mis_low < mis_high"),
    (lambda x, m: mis_weight(x, m, 3.0, 2.0), "mis_low < mis_high"),
    (lambda x, m: geo_keep(x, m, 1.001, 0.999), "geo_low < geo_high"),
    (lambda x, m: icepop_keep(x, 1.5, 2.0), "icepop_low < 1"),
    (lambda x, m: icepop_weight(x, 0.5, 0.5), "icepop_low < 1 < icepop_high"),
], ids=["tis_cap", "tis_cap_neg", "seq_tis_cap", "mis_band", "mis_weight_inverted",
        "geo_inverted", "icepop_band", "icepop_weight_empty"])
def test_reject_empty_band_or_cap_V4(call, knob):
    """An empty or inverted band (low >= high) or a cap <= 0 is an error naming the knob."""
    with pytest.raises(ValueError, match=knob):
        call(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))


# ---- by hand -------------------------------------------------------------------------

def test_weights_by_hand_V4():
    """rho = (2, 2 | 0.5, 1.5 | 1, pad): products (4, 0.75, 1), geometric means (2, 0.866, 1).

    seq TIS, C = 2: (2, 0.75, 1). MIS, band [0.5, 2]: (0, 0.75, 1). Sequence rejection: (0, 1, 1).
    Geometric rejection, band [0.8, 1.2]: (0, 1, 1). IcePop, band [0.5, 2]: every token's own
    rho (2, 2 | 0.5, 1.5 | 1); with band [0.6, 1.8]: (0, 0 | 0, 1.5 | 1)."""
    rho = torch.tensor([[2.0, 2.0], [0.5, 1.5], [1.0, 1.0]], dtype=torch.float64)
    x = rho.log()
    m = torch.tensor([[1, 1], [1, 1], [1, 0]], dtype=torch.bool)
    close = lambda a, b: torch.testing.assert_close(  # noqa: E731
        a, torch.tensor(b, dtype=torch.float64), atol=ATOL, rtol=0)
    close(seq_tis_weight(x, m, 2.0), [2.0, 0.75, 1.0])
    close(mis_weight(x, m, 0.5, 2.0), [0.0, 0.75, 1.0])
    assert mis_keep(x, m, 0.5, 2.0).tolist() == [False, True, True]
    assert geo_keep(x, m, 0.8, 1.2).tolist() == [False, True, True]
    close(icepop_weight(x, 0.5, 2.0), [[2.0, 2.0], [0.5, 1.5], [1.0, 1.0]])
    close(icepop_weight(x, 0.6, 1.8), [[0.0, 0.0], [0.0, 1.5], [1.0, 1.0]])


def test_sequence_weights_do_not_overflow_V4():
    """A product far out of range (sum log rho = 2000) gives a cap, not inf: seq TIS = C, MIS and
    the rejection drop it (compared in log space)."""
    x = torch.full((1, 4), 500.0, dtype=torch.float32)
    m = torch.ones(1, 4, dtype=torch.bool)
    assert seq_tis_weight(x, m, 2.0).tolist() == [2.0]
    assert mis_weight(x, m, 0.5, 2.0).tolist() == [0.0]
    assert mis_keep(x, m, 0.5, 2.0).tolist() == [False]


# ---- against a plain loop over the definitions ------------------------------------------

def _loop_weights(x: torch.Tensor, m: torch.Tensor, C: float, low: float, high: float):
    """Every weight from its definition, one sequence and one token at a time in plain Python."""
    B, T = x.shape
    rho = [[math.exp(float(x[i, t])) for t in range(T)] for i in range(B)]
    out = {"tis": [], "seq_tis": [], "mis": [], "seq_keep": [], "geo_keep": [], "icepop": [],
           "token_keep": []}
    for i in range(B):
        toks = [t for t in range(T) if m[i, t]]
        prod = math.prod(rho[i][t] for t in toks)
        geo = prod ** (1 / len(toks)) if toks else 1.0
        out["seq_tis"].append(min(prod, C))
        out["mis"].append(prod if low <= prod <= high else 0.0)
        out["seq_keep"].append(low <= prod <= high)
        out["geo_keep"].append(low <= geo <= high)
        out["tis"].append([min(r, C) for r in rho[i]])
        out["icepop"].append([r if low <= r <= high else 0.0 for r in rho[i]])
        out["token_keep"].append([low <= r <= high for r in rho[i]])
    return out


@pytest.mark.parametrize("seed", range(5))
def test_weights_match_loop_reference_V4(seed):
    """Vectorised formulas == the loop over their definitions on random log-ratios and ragged
    masks (band [0.7, 1.4], C = 1.3; values near a band edge excluded by construction: every
    log-ratio is 0.05 times an odd integer, and no product lands within 1e-9 of an edge)."""
    g = torch.Generator().manual_seed(seed)
    B, T = 8, 6
    x = 0.05 * (2 * torch.randint(-4, 4, (B, T), generator=g) + 1).double()
    lens = torch.randint(1, T + 1, (B,), generator=g)
    m = torch.arange(T)[None, :] < lens[:, None]
    C, low, high = 1.3, 0.7, 1.4
    ref = _loop_weights(x, m, C, low, high)
    close = lambda a, b: torch.testing.assert_close(  # noqa: E731
        a, torch.tensor(b, dtype=torch.float64), atol=1e-12, rtol=1e-12)
    close(tis_weight(x, C), ref["tis"])
    close(seq_tis_weight(x, m, C), ref["seq_tis"])
    close(mis_weight(x, m, low, high), ref["mis"])
    assert mis_keep(x, m, low, high).tolist() == ref["seq_keep"]
    assert geo_keep(x, m, low, high).tolist() == ref["geo_keep"]
    assert mis_keep(x, m, low, high, geometric=True).tolist() == ref["geo_keep"]
    close(icepop_weight(x, low, high), ref["icepop"])
    assert icepop_keep(x, low, high).tolist() == ref["token_keep"]


def test_fractional_mask_is_an_error_not_a_weight():
    """One mask rule across the package: a mask of 0.5 is refused, never used as a weight."""
    from tailtheory.lopti.reweight import lopti_passes
    from tailtheory.tim.corrections import seq_log_ratio

    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="mask"):
        seq_log_ratio(x, torch.full((2, 3), 0.5), geometric=False)
    with pytest.raises(ValueError, match="mask"):
        lopti_passes(x, torch.full((2, 3), 0.5), 0.5)
