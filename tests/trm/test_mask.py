"""Input rules of TRM's masking (tailtheory.trm.mask, T12): masks select, batches are not empty."""

import pytest
import torch

from tailtheory.trm import mask as tm

ALIVE = torch.tensor([[True, True, False], [True, True, True]])
KL = torch.tensor([[0.01, 0.2, 9.0], [0.01, 0.02, 0.03]], dtype=torch.float64)


def test_T12_loss_rejects_an_empty_batch():
    with pytest.raises(ValueError, match=r"empty batch \(B = 0\)"):
        tm.trm_masked_loss(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.bool),
                           torch.zeros(0, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"tok_loss must have shape \(B, T\)"):
        tm.trm_masked_loss(torch.zeros(3), torch.ones(3, dtype=torch.bool),
                           torch.ones(3, dtype=torch.bool))


def test_T12_zero_one_masks_equal_bool_and_weights_are_refused():
    tok = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    keep = torch.tensor([True, False])
    want = tm.trm_masked_loss(tok, ALIVE, keep)[0]
    for m, k in ((ALIVE.long(), keep.long()), (ALIVE.float(), keep.double()),
                 (ALIVE.tolist(), keep.tolist())):
        assert tm.trm_masked_loss(tok, m, k)[0] == want
        assert torch.equal(tm.trm_mask(m, "max", kl=KL, delta_max=0.1),
                           tm.trm_mask(ALIVE, "max", kl=KL, delta_max=0.1))
    with pytest.raises(ValueError, match="mask must be a bool tensor, or a numeric one"):
        tm.trm_masked_loss(tok, ALIVE * 0.5, keep)
    with pytest.raises(ValueError, match="keep must be a bool tensor, or a numeric one"):
        tm.trm_masked_loss(tok, ALIVE, torch.tensor([2, 0]))
    with pytest.raises(ValueError, match="mask must be a bool tensor, or a numeric one"):
        tm.trm_mask(ALIVE * 0.5, "max", kl=KL, delta_max=0.1)


def test_T12_shape_mismatches_name_both_arguments():
    with pytest.raises(ValueError, match=r"tok_loss \(2, 2\) and mask \(2, 3\)"):
        tm.trm_masked_loss(torch.zeros(2, 2), ALIVE, torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"kl \(2, 2\) and mask \(2, 3\)"):
        tm.trm_mask(ALIVE, "max", kl=KL[:, :2], delta_max=0.1)
    with pytest.raises(ValueError, match=r"log_ratio \(2, 2\) and mask \(2, 3\)"):
        tm.trm_mask(ALIVE, "avg", log_ratio=KL[:, :2], delta_avg=0.1)
