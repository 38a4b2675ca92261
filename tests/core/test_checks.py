"""The input rules of tailtheory.core.checks: masked logits, dtype-aware probabilities, masks."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tailtheory.core.checks import (PROB_SUM_ATOL, check_broadcastable, check_finite,
                                    check_logits, check_mask, check_probs, prob_sum_atol)

from strategies import masked_logits

NINF = -math.inf


# --- logits: -inf is a masked token, NaN / +inf / a dead row are errors ------------------------

@given(masked_logits())
def test_masked_logits_accepted_unchanged(args):
    z, _ = args
    assert torch.equal(check_logits(z), z)


@pytest.mark.parametrize("bad, kind", [(math.nan, "NaN"), (math.inf, r"\+inf")])
def test_nan_and_plus_inf_logits_rejected(bad, kind):
    z = torch.zeros(2, 3, 4)
    z[1, 2, 3] = bad
    z[0, 0, 0] = NINF                                  # a masked token elsewhere is fine
    with pytest.raises(ValueError, match=rf"^logits contains 1 non-finite .*\({kind}\); first "
                                         r"at index \(1, 2, 3\)"):
        check_logits(z)


def test_all_minus_inf_row_rejected_with_its_index():
    z = torch.zeros(2, 3, 4)
    z[1, 0] = NINF
    with pytest.raises(ValueError, match=r"logits has 1 row\(s\) whose every entry is -inf "
                                         r"\(first at index \(1, 0\)\)"):
        check_logits(z)
    with pytest.raises(ValueError, match="every entry is -inf"):
        check_logits([NINF])


def test_minus_inf_refused_where_not_logits():
    with pytest.raises(ValueError, match=r"delta contains 1 non-finite value\(s\) \(inf\)"):
        check_logits([0.0, NINF], "delta", allow_masked=False)


def test_large_finite_logits_whose_sum_overflows_are_fine():
    """The cheap row-sum test sends overflowing rows to the exact scan, which accepts them."""
    z = torch.full((2, 3), 1e308, dtype=torch.float64)
    assert torch.equal(check_logits(z), z) and torch.equal(check_finite(z, "z"), z)
    h = torch.full((4, 40_000), 60_000.0, dtype=torch.float16)   # fp16 sums overflow
    assert check_logits(h, dtype=None).dtype == torch.float16


# --- probabilities: the tolerance follows the dtype --------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("V", [2, 64, 4096, 151_936])
def test_low_precision_softmax_accepted(dtype, V):
    """A softmax computed in, or rounded to, bf16/fp16/float32 is a probability vector."""
    g = torch.Generator().manual_seed(V)
    for scale in (0.1, 1.0, 5.0, 30.0):
        z = torch.randn(4, V, generator=g) * scale
        for p in (torch.softmax(z.to(dtype), -1), torch.softmax(z, -1).to(dtype)):
            assert check_probs(p).dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_tolerance_still_refuses_wrong_sums(dtype):
    V = 1000
    p = torch.full((V,), 1.0 / V) * (1 + 4 * prob_sum_atol(dtype, V))
    with pytest.raises(ValueError, match="must sum to 1"):
        check_probs(p.to(dtype))


def test_float64_tolerance_unchanged():
    """Float64 inputs keep the tolerance 1e-6 whatever V (valid inputs keep their verdict)."""
    assert prob_sum_atol(torch.float64, 151_936) == PROB_SUM_ATOL == 1e-6
    assert prob_sum_atol(torch.int64, 10) == PROB_SUM_ATOL
    assert prob_sum_atol(torch.float32, 151_936) < 2e-4
    assert prob_sum_atol(torch.bfloat16, 151_936) < 0.035
    with pytest.raises(ValueError, match="must sum to 1"):
        check_probs(torch.tensor([0.5, 0.5 + 2e-6], dtype=torch.float64))
    with pytest.raises(ValueError, match="p must lie in"):
        check_probs([1.5, -0.5])


# --- masks: bool, or numbers that are exactly 0 or 1 -------------------------------------------

@given(st.integers(0, 2**31 - 1))
def test_zero_one_masks_equal_bool(seed):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(3, 5, generator=g) < 0.5
    like = torch.zeros(3, 5)
    for x in (m, m.long(), m.int(), m.to(torch.uint8), m.float(), m.double(), m.numpy(),
              m.numpy().astype(np.int32), m.tolist()):
        out = check_mask(x, like, allow_empty=True)
        assert out.dtype == torch.bool and torch.equal(out, m)


@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0, math.nan, 3])
def test_non_zero_one_masks_rejected(bad):
    m = torch.ones(2, 3, dtype=torch.float64 if isinstance(bad, float) else torch.int64)
    m[1, 1] = bad
    with pytest.raises(ValueError, match=r"^mask must be a bool tensor, or a numeric one whose "
                                         r"values are exactly 0 or 1"):
        check_mask(m, torch.zeros(2, 3))


def test_mask_shape_and_emptiness():
    with pytest.raises(ValueError, match=r"mask has shape \(2, 4\), expected \(2, 3\)"):
        check_mask(torch.ones(2, 4, dtype=torch.bool), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"x \(2, 3\) and mask \(2, 4\) must have the same"):
        check_mask(torch.ones(2, 4, dtype=torch.bool), torch.zeros(2, 3), like_name="x")
    with pytest.raises(ValueError, match="selects no element"):
        check_mask(torch.zeros(2, 3), torch.zeros(2, 3))
    assert not check_mask(torch.zeros(2, 3), torch.zeros(2, 3), allow_empty=True).any()
    with pytest.raises(ValueError, match="complex"):
        check_mask(torch.ones(2, dtype=torch.complex64), torch.zeros(2))


def test_broadcastable_names_both():
    assert check_broadcastable(torch.zeros(3, 1), torch.zeros(4), ("a", "b")) == (3, 4)
    with pytest.raises(ValueError, match=r"a \(3,\) and b \(2,\) must broadcast"):
        check_broadcastable(torch.zeros(3), torch.zeros(2), ("a", "b"))
