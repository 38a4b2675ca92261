"""LOPTI's one-step probes (L1, L4, L5) on any checkpoint: Figures 1 and 3 on a batch of text.

Source: LOPTI (Yang et al., arXiv 2505.12929), Figures 1 and 3.

The stored measurement (:mod:`tailtheory.lopti.measurement`) probes GRPO batches of the
toolkit's task policy, whose rewards give the advantages. A user's checkpoint has no task here,
so the batch is text (``input_ids (B, L)``, e.g. the standard-library windows of
:func:`tailtheory.engine.start.text_windows.text_windows`), every token after the first is a
"response" token, ``pi_old`` is the model's own probability of it (the policy that "generated"
the batch is the one probed, as at the start of a PPO epoch), and the advantages carry only the
sign structure of a GRPO batch: ``+1`` on every token of half the sequences and ``-1`` on the
other half, the halves drawn by ``seed`` (:func:`text_batch`). With no reward the update
directions mean nothing about a task; what the probes show is how the network routes the
surrogate's gradient by ``pi_old`` bin: (d) ``||grad L_b||`` per bin, (c), (e), (f) ``Delta pi``
after one SGD step on all / the lowest / the highest bin, Figure 3's rise fractions, and L1's
per-token ``||grad_theta log pi||`` against ``1 - p``.

Every forward runs through the fused LM head (``onestep.HEADS["fused"]``): no ``(B, L, V)``
logits, on the model's device. The numbers are :func:`tailtheory.lopti.onestep.batch_stats`'s,
in the measurement format of :mod:`tailtheory.lopti.measurement` (one seed, one batch), so the
figures of :mod:`tailtheory.lopti.figures` draw them.

Shapes: input_ids (B, L), per-token (B, L).
"""

from __future__ import annotations

import torch

from tailtheory.lopti.onestep import L1_PER_BIN, SGD_LR, ProbeBatch, _logp_fn, batch_stats


@torch.no_grad()
def text_batch(model, input_ids, seed: int = 0, head: str = "fused") -> ProbeBatch:
    """The probe batch of ``input_ids`` on ``model``'s device (module docstring): ``mask`` every
    position after the first, ``pi_old`` the model's probability of each token (float64 from
    the float32 log-prob, so it underflows only below e^-745), advantages ``+-1`` per sequence.

    Shapes: input_ids (B, L) -> ProbeBatch of (B, L) tensors.
    """
    dev = next(model.parameters()).device
    ids = torch.as_tensor(input_ids).long().to(dev)
    if ids.ndim != 2 or ids.shape[1] < 2:
        raise ValueError(f"input_ids must have shape (B, L) with L >= 2; got {tuple(ids.shape)}")
    B, L = ids.shape
    attn = torch.ones_like(ids, dtype=torch.bool)
    mask = attn.clone()
    mask[:, 0] = False
    pi_old = _logp_fn(head)(model.eval(), ids, attn).double().exp()       # (B, L)
    order = torch.randperm(B, generator=torch.Generator().manual_seed(seed))
    sign = torch.where(order < (B + 1) // 2, 1.0, -1.0).to(dev)            # (B,)
    adv = torch.where(mask, sign[:, None], 0.0).float()                 # (B, L)
    return ProbeBatch(ids, attn, mask, adv, torch.where(mask, pi_old, 1.0))


def gradient_probe(model, input_ids, seed: int = 0, lr: float = SGD_LR,
                   l1_per_bin: int = L1_PER_BIN, head: str = "fused") -> dict:
    """Figures 1 and 3 (L4, L5) and L1's token gradients of ``model`` on one text batch.

    Source: LOPTI (L1, L4, L5). ``{"seeds": [seed], "batches": [{"seed", "batch": 0,
    **batch_stats}]}``: the format of :func:`tailtheory.lopti.measurement.measure`, for
    ``figures.plot_figure1`` / ``plot_figure3`` and ``measurement.seed_values``. ``model`` is
    not modified. Shapes: input_ids (B, L) -> dict.
    """
    pb = text_batch(model, input_ids, seed, head)
    g = torch.Generator().manual_seed(seed)
    stats = batch_stats(model, pb, lr, l1_per_bin, g, head)
    return {"seeds": [seed], "batches": [{"seed": seed, "batch": 0, **stats}]}


__all__ = ["text_batch", "gradient_probe"]
