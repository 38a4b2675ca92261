"""DVP's shared kept set (``tailtheory/pruning/sampler.py``, claim P3): the sampler's ``S`` with
the sampled token always in it; bad inputs raise naming the argument. The trainer-side check
(the trainer renormalises over the same ``S``) is ``tests/engine/test_methods.py``."""

from __future__ import annotations

import pytest
import torch

from tailtheory.pruning.sampler import dvp_keep


def test_dvp_keep_min_p_and_sampled_token_P3():
    """Logits (0, -1, -20), min-p rho = 1e-6: e^-20 < rho, so S = {0, 1}; a token sampled outside
    S (id 2) is put back in (the sampler can only have sampled inside its own S)."""
    z = torch.tensor([[[0.0, -1.0, -20.0], [0.0, -1.0, -20.0]]], dtype=torch.float64)
    keep = dvp_keep(z, torch.tensor([[0, 2]]), "min_p", 1e-6)
    assert keep.tolist() == [[[True, True, False], [True, True, True]]]


def test_dvp_keep_rejects_nan_logits_P3():
    z = torch.zeros(2, 3, 4)
    z[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match="roll_logits"):
        dvp_keep(z, torch.zeros(2, 3, dtype=torch.long), "top_p", 0.5)


def test_dvp_keep_rejects_token_shape_P3():
    with pytest.raises(ValueError, match="tokens"):
        dvp_keep(torch.zeros(2, 3, 4), torch.zeros(3, dtype=torch.long), "top_p", 0.5)
