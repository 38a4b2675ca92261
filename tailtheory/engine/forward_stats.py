"""The trainer's forward over a rollout batch: per-token statistics, whole or in micro-batches.

Source: GRPO's ``pi_old`` / ``pi_train`` forward and the update's forward (see
``engine/trainer.py``). One function, :func:`forward_stats`, is every forward the trainer runs
over a :class:`~tailtheory.engine.rollout.engine.RolloutBatch`: the fused LM head or the full logits
(decided by the run, never by the call), and above ``cfg.micro_batch`` rows micro-batches of rows
of similar length, each trimmed to its own longest prompt and response (:func:`batch_rows`).

A non-finite number stops the run (:class:`TrainingDiverged`, raised by :func:`check_finite`).

Shapes: ``B`` rows, ``P`` prompt columns, ``T`` response tokens, ``V`` vocabulary; per-token
``(B, T)``, logits ``(B, T, V)``.
"""

from __future__ import annotations

import torch

from tailtheory.core.stats import token_stats
from tailtheory.engine.policy_forward import fused_response_stats, response_logits, use_fused_head
from tailtheory.engine.rollout.engine import RolloutBatch


class TrainingDiverged(ValueError):
    """A NaN or inf in the loss, the logits or the weights; the last good checkpoint is kept."""


def all_finite(x: torch.Tensor) -> bool:
    """Whether ``x`` holds no NaN or inf. A sum with a NaN or inf among its terms is not finite,
    so a finite sum settles it in one read of ``x`` (0.018 s against ``isfinite(x).all()``'s
    0.34 s on the update's ``(64, 134, 4096)`` float32 logits, one thread); a non-finite sum (an
    entry, or an overflow of finite entries) is checked entry by entry."""
    if x.is_floating_point() and bool(torch.isfinite(x.sum())):
        return True
    return bool(torch.isfinite(x).all())


def check_finite(x: torch.Tensor, what: str, step: int) -> None:
    """Raise :class:`TrainingDiverged` naming ``what`` and ``step`` when ``x`` holds NaN or inf."""
    if not all_finite(x):
        raise TrainingDiverged(f"non-finite {what} at step {step}; the run stopped and its last "
                               f"good checkpoint is kept")


def wants_exact_kl(cfg) -> bool:
    """Whether the run's TRM correction uses the exact token KL (whole distributions: logits)."""
    return any(m.name == "trm" for m in cfg.spec.corrections) and cfg.trm_estimator == "exact"


def forward_stats(model, rb: RolloutBatch, keep, cfg, step: int, ref=None,
                  self_ref: bool = False,
                  grad_logp: torch.Tensor | None = None) -> tuple[dict, torch.Tensor | None]:
    """The trainer forward's per-token statistics, and with ``self_ref`` its detached logits
    ``(B, T, V)`` (else None: ``self_ref`` is the one use of them, and assembling them from
    micro-batches cost 1.8 s of a 6.5 s update at V = 4,096, 256 rows of up to 134 tokens).

    Fused LM head (no ``(B, T, V)`` logits) when :func:`use_fused_head` and the step does not
    need whole distributions (TRM's exact KL: to the sampler's logits ``ref``, or on ``exact`` to
    this forward's own with ``self_ref``, V1). Decided by the run, not the call: every forward of
    a step takes one path.

    Batches of more than ``cfg.micro_batch`` rows run in micro-batches (:func:`micro_batched`):
    the same statistics, the graph kept per micro-batch, so one ``backward`` of the step's loss
    runs through each micro-batch's graph on its own small tensors.

    ``grad_logp`` (B, T), when given: a loss's gradient with respect to the log-probs, known
    before the forward. Each micro-batch then runs forward with its graph and backward through
    it at once (:func:`backward_through`), adding to the parameters' ``.grad``, and the
    statistics come back detached: one forward serves both the statistics and the update, with
    one micro-batch's graph alive at a time (the trainer's first pass of a micro-batch update,
    ``engine/trainer.py``).
    """
    B = rb.response.shape[0]
    if not cfg.micro_batch or B <= cfg.micro_batch:
        st, z = forward_stats_rows(model, rb, keep, cfg, step, ref, self_ref)
        if grad_logp is not None:
            st = backward_through(st, grad_logp)
        return st, z if self_ref else None
    return micro_batched(model, rb, keep, cfg, step, ref, self_ref, grad_logp)


def backward_through(st: dict, grad_logp: torch.Tensor) -> dict:
    """Backpropagate ``grad_logp`` (B, T) through the graph of ``st["logp"]`` (the chain rule:
    ``sum_bt grad_logp[b, t] d logp[b, t] / d theta`` is added to the parameters' ``.grad``);
    returns the statistics detached."""
    (st["logp"] * grad_logp).sum().backward()
    return {name: x.detach() for name, x in st.items()}


def micro_batched(model, rb: RolloutBatch, keep, cfg, step: int, ref, self_ref: bool,
                  grad_logp: torch.Tensor | None = None) -> tuple[dict, torch.Tensor | None]:
    """:func:`forward_stats_rows` over micro-batches of ``cfg.micro_batch`` rows of similar
    length (rows sorted by prompt + response length), each trimmed to its own longest prompt and
    response; results (and, with ``self_ref``, the logits) scattered back to the batch's row
    order and zero-padded to ``T``.

    A full forward over ``B`` rows is slower on a CPU than the same rows in micro-batches of
    64: its activations leave the caches (256 rows: 1.4x the time at 130 tokens a row,
    ``benchmarks/bench_step.py``; 4x at 85 tokens). The numbers equal the whole-batch
    forward's up to float32 rounding (reduction order), and are bitwise the same from one run to
    the next.
    """
    B, T = rb.response.shape
    parts, logits = [], []
    for rows, sub in micro_batches(rb, cfg.micro_batch):
        st, z = forward_stats_rows(model, sub, slice_bt(keep, rows, sub), cfg, step,
                                   slice_bt(ref, rows, sub), self_ref)
        if grad_logp is not None:  # this micro-batch's backward before the next one's forward
            st = backward_through(st, slice_bt(grad_logp, rows, sub))
        parts.append((rows, st))
        if self_ref:       # else each micro-batch's logits are freed with it (no-grad forwards)
            logits.append(z)
    order = torch.cat([rows for rows, _ in parts])                            # (B,)
    out = {}
    for name in parts[0][1]:
        first = parts[0][1][name]
        full = first.new_zeros((B, T) + tuple(first.shape[2:]))
        full = full.index_put((order,), torch.cat([pad_t(st[name], T) for _, st in parts]))
        out[name] = full
    z = None
    if self_ref:  # only the exact path's TRM reference reads the whole logits back
        z = torch.cat([pad_t(z, T) for z in logits])
        z = z.new_zeros(z.shape).index_put((order,), z)
    return out, z


def micro_batches(rb: RolloutBatch, size: int):
    """``(rows, sub-batch)`` of ``rb`` in micro-batches of ``size`` rows (0: all at once) of
    similar length (rows sorted by prompt + response length, stably), each trimmed to its own
    longest prompt and response (:func:`batch_rows`)."""
    lens = rb.mask.sum(-1)                                                    # (B,)
    order = torch.argsort(rb.prompt_lens + lens, stable=True)
    for rows in order.split(size or rb.response.shape[0]):
        yield rows, batch_rows(rb, rows, int(rb.prompt_lens[rows].max()), int(lens[rows].max()))


def backward_by_micro_batch(model, rb: RolloutBatch, keep, cfg, step: int,
                            grad_logp: torch.Tensor) -> None:
    """Add to the parameters' ``.grad`` the gradient of a loss of the trainer's log-probs whose
    gradient with respect to them is ``grad_logp`` (B, T): by the chain rule,
    ``sum_bt grad_logp[b, t] d logp[b, t] / d theta``. Each of :func:`micro_batches` runs
    forward with its graph and backward through it before the next, so one micro-batch's
    activations are alive at a time (``TrainConfig.update_memory``)."""
    for rows, sub in micro_batches(rb, cfg.micro_batch):
        st, _ = forward_stats_rows(model, sub, slice_bt(keep, rows, sub), cfg, step)
        backward_through(st, slice_bt(grad_logp, rows, sub))


def pad_t(x: torch.Tensor, T: int) -> torch.Tensor:
    """``x (b, t, ...)`` zero-padded along dim 1 to ``T`` (differentiable)."""
    if x.shape[1] == T:
        return x
    pad = x.new_zeros((x.shape[0], T - x.shape[1]) + tuple(x.shape[2:]))
    return torch.cat([x, pad], 1)


def slice_bt(x, rows: torch.Tensor, sub: RolloutBatch) -> torch.Tensor | None:
    """Rows ``rows`` of a ``(B, T, ...)`` tensor, cut to ``sub``'s response length."""
    return None if x is None else x[rows, :sub.response.shape[1]]


def batch_rows(rb: RolloutBatch, rows: torch.Tensor, p: int, t: int) -> RolloutBatch:
    """Rows ``rows`` of ``rb``: the prompt block cut to its last ``p`` columns (left padding only
    is dropped), the response to its first ``t`` tokens (past every row's EOS)."""
    P = rb.prompt_len
    t = max(t, 1)
    cols = torch.arange(P - p, P + t, device=rb.input_ids.device)
    return RolloutBatch(input_ids=rb.input_ids[rows][:, cols], prompt_len=p,
                        response=rb.response[rows, :t], mask=rb.mask[rows, :t],
                        logp=rb.logp[rows, :t], logits=None,
                        attention_mask=rb.attention_mask[rows][:, cols],
                        prompt_lens=rb.prompt_lens[rows])


def forward_stats_rows(model, rb: RolloutBatch, keep, cfg, step: int, ref=None,
                       self_ref: bool = False) -> tuple[dict, torch.Tensor | None]:
    """:func:`forward_stats` in one forward over every row of ``rb``."""
    if use_fused_head(model) and not wants_exact_kl(cfg):
        st = fused_response_stats(model, rb, cfg.temperature, keep)
        check_finite(st["logp"].detach(), "log-probs", step)
        return st, None
    z = response_logits(model, rb)                                       # (B, T, V)
    check_finite(z.detach(), "logits", step)
    st = token_stats(z, rb.response, ref_logits=z.detach() if self_ref else ref, keep=keep,
                     temperature=cfg.temperature)
    return st, z.detach()
