"""The streaming sums of ``tailtheory diagnose`` (``tailtheory.diagnose.aggregate``)."""

import numpy as np
import torch

from tailtheory.diagnose.aggregate import implied_eps
from tailtheory.mismatch.logprob import mismatch_bound


def test_implied_eps_inverts_m3_bound():
    """implied_eps is the eps at which M3's exact bound equals |Delta| (DVP M3)."""
    g = torch.Generator().manual_seed(0)
    p = torch.rand(500, generator=g, dtype=torch.float64) * 0.999
    eps = torch.rand(500, generator=g, dtype=torch.float64) * 0.5
    a = mismatch_bound(p, eps, "exact")
    assert np.allclose(implied_eps(p.numpy(), a.numpy()), eps.numpy(), rtol=1e-9, atol=1e-12)
    assert implied_eps(np.array([0.3]), np.array([0.0]))[0] == 0.0
    assert np.isinf(implied_eps(np.array([1.0]), np.array([1e-3]))[0])
