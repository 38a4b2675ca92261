"""Small ``PolicyBatch`` es for the method tests, built from probabilities (easier to check by
hand than log-probs), shared by ``tests/engine/test_methods.py`` and each section's
``test_methods.py``."""

from __future__ import annotations

import torch

from tailtheory.engine.types import MethodParams, PolicyBatch

HP = MethodParams()
"""The default hyperparameters."""
ATOL = 1e-12


def batch(old_p, logp_p=None, adv=None, mask=None, roll_p=None, **kw) -> PolicyBatch:
    """A PolicyBatch from probabilities: ``old_p`` (pi_old), ``logp_p`` (the current policy,
    default pi_old), ``roll_p`` (the rollout's, default pi_old), ``(B, T)`` nested lists."""
    old = torch.tensor(old_p, dtype=torch.float64).log()
    logp = old.clone() if logp_p is None else torch.tensor(logp_p, dtype=torch.float64).log()
    roll = old.clone() if roll_p is None else torch.tensor(roll_p, dtype=torch.float64).log()
    m = torch.ones_like(old, dtype=torch.bool) if mask is None else torch.tensor(mask).bool()
    a = None if adv is None else torch.tensor(adv, dtype=torch.float64)
    return PolicyBatch(logp=logp, old_logp=old, roll_logp=roll, mask=m, adv=a, **kw)
