"""The diagnosis built from the sums (``tailtheory.diagnose.build``): TRM's keep of a response
from its accumulated statistic equals ``trm_mask`` on the whole log-ratios (T12)."""

import numpy as np
import pytest
import torch

from tailtheory.diagnose.build import accept
from tailtheory.trm.mask import trm_mask


@pytest.mark.parametrize("criterion, threshold", [("max", 0.05), ("avg", 0.01)])
def test_accept_equals_the_mask_on_whole_sequences(criterion, threshold):
    g = torch.Generator().manual_seed(0)
    log_rho = 0.2 * torch.randn(50, 9, generator=g, dtype=torch.float64)
    mask = torch.rand(50, 9, generator=g) < 0.8
    mask[:, 0] = True
    r = log_rho.exp()
    k2, k3 = 0.5 * log_rho ** 2, r - 1 - log_rho
    stat = (torch.where(mask, k2, 0).amax(-1) if criterion == "max" else
            torch.where(mask, k3, 0).sum(-1) / mask.sum(-1))
    kw = {"delta_max": threshold} if criterion == "max" else {"delta_avg": threshold}
    want = trm_mask(mask, criterion, log_ratio=torch.where(mask, log_rho, 0), **kw).numpy()
    got = accept(stat.numpy(), criterion, threshold)
    assert got.dtype == np.bool_ and 0 < got.sum() < len(got)
    assert np.array_equal(got, want)
