"""Experiments behind OTB's claims: the tables shared by the checks, the figures and notebook 03.

Source: OTB, Li et al., arXiv 2602.07078 (O2, O3, O4, O6). Each table is a pure function of its
arguments (the claims profile, ``quick`` or ``thorough``, picks the sizes); the profile tables
are cached, since the O3 and O4 checks read the same sweep.
"""

from __future__ import annotations

import functools

import pandas as pd
import torch

from tailtheory.core.registry import pick
from tailtheory.core.tabular import TabularPolicy
from tailtheory.otb.variance import (group_sweep, prefix_sq_norms, score_gram, tabular_energy,
                                     variance_sweep)


@functools.lru_cache(maxsize=2)
def variance_table(profile: str) -> tuple[dict, ...]:
    """The O3/O4 sweep of a claims profile (``quick`` or ``thorough``), cached per profile.

    Source: OTB (O3, O4). Rows of :func:`variance_sweep`, shared by the checks and notebook 03.
    """
    return tuple(variance_sweep(Ts=pick(profile, (2, 3, 4, 5), (2, 3, 4, 5, 6)),
                                Vs=pick(profile, (3,), (3, 4)),
                                seeds=pick(profile, (0,), (0, 1, 2, 3))))


@functools.lru_cache(maxsize=2)
def group_table(profile: str) -> tuple[dict, ...]:
    """The O6 finite-group study of a claims profile, averaged over its policies (cached).

    Source: OTB (O6). Rows of :func:`group_sweep`, shared by the check and notebook 03.
    """
    return tuple(group_sweep(
        policies=pick(profile, ((3, 4, None, 1.0), (3, 4, 0, 2.0)),
                      ((3, 4, None, 1.0), (3, 4, 0, 2.0), (3, 5, None, 2.0), (4, 4, 0, 1.0))),
        n_groups=pick(profile, 200, 2000)))


def proxy_table(V: int = 3, T: int = 4, sharpness: float = 1.5, seed: int = 0) -> pd.DataFrame:
    """O2: the proxy ``W_t`` against the true ``||S_<=t||^2`` at every alive position, for the
    tabular policy (orthogonal scores) and the same policy with a shared logit bias (``tied``).

    Source: OTB (O2). Columns ``parameters``, ``t``, ``W_proxy``, ``true_prefix_sq_norm``.
    """
    pol = TabularPolicy.random(V, T, sharpness=sharpness, seed=seed)
    W = tabular_energy(pol)
    parts = []
    for tied in (False, True):
        true = prefix_sq_norms(score_gram(pol, tied=tied), pol.mask)
        t = torch.arange(T).expand_as(W)
        parts.append(pd.DataFrame({"parameters": "shared bias" if tied else "tabular",
                                   "t": t[pol.mask].numpy(), "W_proxy": W[pol.mask].numpy(),
                                   "true_prefix_sq_norm": true[pol.mask].numpy()}))
    return pd.concat(parts, ignore_index=True)


__all__ = ["variance_table", "group_table", "proxy_table"]
