"""P4's pruning trade on any checkpoint, one chunk of positions at a time (DVP).

Source: DVP, Li et al., arXiv 2512.23087 (P4); TIM, Zhong et al., arXiv 2605.14220 (the real
``bf16`` copy as the mismatch source, M7).

:func:`tailtheory.pruning.sweep.pruning_sweep` and
:func:`tailtheory.pruning.trained_tails.mass_shares` take both sides' logits as whole ``(B, T,
V)`` tensors. Every number they report is a sum or a maximum over positions of a per-position
quantity, so here they are folded in over the float32 chunks of
:func:`tailtheory.mismatch.chunked.paired_logit_chunks`, upcast to float64, keeping only the
sums: the extra memory is a few ``(chunk, V)`` float64 tensors. Each chunk's two log-softmaxes
are computed once for the whole sweep (:func:`sweep_rows` prunes them by subtracting the log of
the kept mass; ``sweep._remaining_rows``, the reference, takes two log-softmaxes per ``rho``);
the mass shares are ``trained_tails._share_rows`` itself.

Equal (STYLE rule 20): :func:`sweep_from_chunks` gives ``pruning_sweep``'s and ``mass_shares``'
tables on the same logits to 1e-9 relative (float64 rounding of the log-sums against mismatches
of 1e-3; the shares and masses to 1e-12), tested on M7's model; the chunked logits are those of
``paired_logit_chunks`` (its tolerances).

Shapes: chunks of N = B T flattened positions: z_train, z_infer (n, V).
"""

from __future__ import annotations

from typing import Iterable

import torch

from tailtheory.core.safeset import check_threshold, keep_from_logp
from tailtheory.pruning.sweep import RHO_SWEEP
from tailtheory.pruning.trained_tails import P_BIN_EDGES, _share_rows

SWEEP_KEYS = ("mass_mean", "mass_max", "seq_mass", "kept_frac", "abs_delta_mean",
              "abs_delta_max", "bias_mean", "seq_kl")
"""The columns of :func:`~tailtheory.pruning.sweep.remaining_mismatch`, in its order."""


def sweep_rows(lp: torch.Tensor, lq: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``sweep._remaining_rows`` from the unpruned log-probs, without a log-softmax per ``S``.

    Source: DVP (P1, P4). On ``S`` the pruned log-probs are ``log pi - log(1 - m)``, so
    ``Delta~ = Delta - (log1p(-m') - log1p(-m))`` with ``Delta = lq - lp`` and ``m``, ``m'`` the
    trainer's and sampler's pruned masses; ``pi~' = q / (1 - m')``. Equal to
    ``_remaining_rows`` up to float64 rounding of the log-sums (~1e-15 absolute in ``Delta~``;
    tested). Shapes: lp, lq (n, V) float64 log-softmax of trainer and sampler, keep (n, V) ->
    (n, 4): ``m``, ``E_{pi~'}|Delta~|``, ``max_S |Delta~|``, ``KL(pi~' || pi~)``.
    """
    p, q = lp.exp(), lq.exp()
    m = torch.where(keep, 0.0, p).sum(-1)                               # (n,)
    mq = torch.where(keep, 0.0, q).sum(-1)
    shift = (torch.log1p(-mq) - torch.log1p(-m))[:, None]               # (n, 1)
    D = (lq - lp).sub_(shift).masked_fill_(~keep, 0.0)                  # Delta~ on S, 0 off it
    q_s = q.masked_fill_(~keep, 0.0).div_((1 - mq)[:, None])            # pi~'
    kl = (q_s * D).sum(-1)
    a = D.abs_()
    return torch.stack([m, (q_s * a).sum(-1), a.amax(-1), kl], -1)


def sweep_from_chunks(chunks: Iterable, n_seq: int, rhos=RHO_SWEEP, rule: str = "min_p",
                      edges=P_BIN_EDGES):
    """P4's sweep and the mass shares, folded in chunk by chunk: ``(sweep, shares)``.

    Source: DVP (P4). ``chunks`` yields ``(positions, z_train, z_infer)`` covering every
    position of ``n_seq`` sequences (:func:`tailtheory.mismatch.chunked.paired_logit_chunks`).
    ``sweep`` is :func:`~tailtheory.pruning.sweep.pruning_sweep`'s table (``rho = 0`` first; the
    safe set is the sampler's, applied to both sides), from :func:`sweep_rows`; ``shares`` is
    :func:`~tailtheory.pruning.trained_tails.mass_shares`' table.
    Shapes: chunks of (n, V) -> (DataFrame, DataFrame).
    """
    import pandas as pd

    rho_all = (0.0, *rhos)
    for rho in rho_all:
        check_threshold(rule, rho)
    e = torch.tensor(edges, dtype=torch.float64)
    acc = [[0.0] * 6 for _ in rho_all]     # sums of m, E|Delta|, KL, kept; max m, max |Delta|
    shares, n, V = torch.zeros(3, len(edges) + 1, dtype=torch.float64), 0, None
    for _, z, zi in chunks:
        z, zi, V = z.double(), zi.double(), z.shape[-1]
        n += z.shape[0]
        lp, lq = torch.log_softmax(z, -1), torch.log_softmax(zi, -1)
        for a, rho in zip(acc, rho_all):
            keep = keep_from_logp(lq, rule, rho)                      # safe_vocab_mask's S
            m, a_mean, a_max, kl = sweep_rows(lp, lq, keep).unbind(-1)
            for j, x in enumerate((m.sum(), a_mean.sum(), kl.sum(), torch.count_nonzero(keep))):
                a[j] += float(x)
            a[4], a[5] = max(a[4], float(m.max())), max(a[5], float(a_max.max()))
        shares += _share_rows(z, zi, e.to(z.device)).sum(0).cpu()
    if not n:
        raise ValueError("no chunk of logits to sweep")
    rows = [{"rho": float(rho), "mass_mean": a[0] / n, "mass_max": a[4], "seq_mass": a[0] / n_seq,
             "kept_frac": a[3] / n / V, "abs_delta_mean": a[1] / n, "abs_delta_max": a[5],
             "bias_mean": a[2] / n, "seq_kl": a[2] / n_seq} for rho, a in zip(rho_all, acc)]
    tot = shares / shares.sum(-1, keepdim=True)
    table = pd.DataFrame({"p_lo": (0.0, *edges), "p_hi": (*edges, 1.0),
                          "mass_share": tot[0].numpy(), "abs_share": tot[1].numpy(),
                          "kl_share": tot[2].numpy()})
    return pd.DataFrame(rows), table


def pruning_probe(model, input_ids, path: str = "bf16", rhos=RHO_SWEEP, rule: str = "min_p"):
    """P4 on ``model`` and ``input_ids`` with the real ``path`` mismatch: ``(sweep, shares)``.

    Source: DVP (P4), TIM (M7). :func:`sweep_from_chunks` over
    :func:`~tailtheory.mismatch.chunked.paired_logit_chunks`; the tables draw with
    ``figures.plot_pruning_tradeoff`` (notebook 01) and ``figures.plot_mass_shares`` (notebook
    05). Shapes: input_ids (B, T) -> (DataFrame, DataFrame).
    """
    from tailtheory.mismatch.chunked import paired_logit_chunks

    B = torch.as_tensor(input_ids).shape[0]
    return sweep_from_chunks(paired_logit_chunks(model, input_ids, path), B, rhos, rule)


__all__ = ["SWEEP_KEYS", "sweep_rows", "sweep_from_chunks", "pruning_probe"]
