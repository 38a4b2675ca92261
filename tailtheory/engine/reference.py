"""GRPO's step in one file of plain torch, for reading; the engine's ``train_step`` is what runs.

Source: GRPO (Shao et al., DeepSeekMath, arXiv 2402.03300), with the token-mean aggregation
and the asymmetric clip of LOPTI's run scripts, as the engine's ``grpo`` method. This module is
the whole step written out for a reader; the engine's
:func:`~tailtheory.engine.trainer.train_step` is what runs (every method, every rollout path,
micro-batches, metrics, checkpoints). ``tests/engine/test_reference.py`` runs both from the
same weights and checks that they agree: the same sampled tokens at every step, the loss, the
gradient norm and the final weights to float32 rounding.

The step, and the engine's files that compute each part:

1. **Sample** ``G`` responses per prompt (:func:`sample`): a KV-cache decode loop, one
   ``torch.multinomial`` a step over the rows still alive. Engine: ``rollout/engine.py``
   (``RolloutEngine._decode`` / ``_step``) with the ``fast`` decoder of ``rollout/fast.py``.
2. **Reward** each response: the task's ``reward`` (``tasks/task.py``).
3. **Group advantages** ``A_i = (R_i - mean_g R) / (std_g R + eps)`` (:func:`group_advantages`).
   Engine: ``advantages.py`` (``grpo_advantages``), ``methods.py`` (``group_advantage``).
4. **pi_old**: one float32 full forward over prompt + response (:func:`response_logp`), kept
   with its graph for the update. Engine: ``policy_forward.py``, ``forward_stats.py``
   (``core/forward.py``, ``core/stats.py``). On the ``exact`` path it is also the rollout's
   log-probs (TIM, V1), so ``pi_roll = pi_old`` and the mismatch is 0.
5. **Loss**: the clipped surrogate, averaged over every response token (:func:`grpo_loss`).
   Engine: ``methods.py`` (``clipped_surrogate``, ``aggregate_loss``), ``update_plan.py``.
6. **Update**: clip the gradient norm (:func:`clip_grad_norm`), one AdamW step
   (:func:`adamw_step`). Engine: ``trainer.py`` (``optimizer_step``, and ``_train``, which builds
   ``torch.optim.AdamW`` with torch's betas and eps).

Plain GRPO has no KL term (the engine's ``loss/approx_kl`` is a monitor, not in the loss), and one
update per batch: ``pi_theta = pi_old`` when the loss is taken, so the ratio is exactly 1, the clip
never binds and the gradient is that of ``-mean_t A_t log pi_theta(y_t)``. The clip matters once
a batch serves several updates (Lopti's two passes); it is written here as the engine has it.

What "equal" means (STYLE 20): the tokens are drawn from one ``torch.Generator`` the way the
engine draws them (same calls, same shapes), from logits that differ from the ``fast`` decoder's
by float32 rounding only (another forward, another reduction order), so the same tokens come out
unless a draw lands within rounding of a boundary between two tokens. The loss, gradient and
weights agree to float32 rounding.

Shapes: ``B = P * G`` responses (``P`` prompts, ``G`` each), ``S`` left-padded prompt columns,
``T`` response tokens, ``V`` vocabulary; per-token ``(B, T)`` with a ``mask (B, T)``.
"""

from __future__ import annotations

import math

import torch

from tailtheory.core.models import cache_keyword, output_cache
from tailtheory.engine.tasks.task import Problem, Task

GRPO_EPS = 1e-6
"""Added to the group std: ``engine/advantages.py``'s ``GRPO_EPS`` (verl's epsilon)."""

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
"""AdamW's ``(beta1, beta2)`` and ``eps``: torch's defaults, which the engine keeps
(``trainer._train`` passes only ``lr`` and ``weight_decay``)."""

CLIP_EPS = 1e-6
"""``torch.nn.utils.clip_grad_norm_``'s guard: the scale is ``max_norm / (norm + 1e-6)``."""


# ---- 1. sampling --------------------------------------------------------------------------

def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids (B, S), attn (B, S) bool)``: prompts right-aligned, ``pad_id`` on their left."""
    S = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), S), pad_id, dtype=torch.long)
    attn = torch.zeros(len(prompts), S, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, S - len(p):] = torch.tensor(p)
        attn[i, S - len(p):] = True
    return ids, attn


def positions(attn: torch.Tensor) -> torch.Tensor:
    """Each token's position, counted from its row's first real token (padding gets 0), so a
    padded row computes what it would alone. Shapes: (B, S) bool -> (B, S) long."""
    return (attn.long().cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def sample(model, prompts: list[list[int]], T: int, stop_ids, pad_id: int, tau: float,
           generator: torch.Generator):
    """``(ids (B, S), attn (B, S), response (B, T'), mask (B, T'))``, ``T' <= T``: one response
    per prompt, drawn token by token from ``softmax(z / tau)`` with the model's KV cache.

    A row ends at its first stop id (``mask`` is True up to and including it; ``pad_id`` after);
    sampling stops when every row has ended. Each step makes one
    ``torch.multinomial(p, 1, generator)`` over the rows still alive, in batch order: the
    draws of the engine's ``fast`` decoder, which drops finished rows, hence its tokens (the
    ``hf`` decoder draws for every row at every step: the same distributions, other tokens).
    """
    dev = next(model.parameters()).device
    ids, attn = (x.to(dev) for x in left_pad(prompts, pad_id))            # (B, S)
    B = ids.shape[0]
    stops = torch.tensor(list(stop_ids), device=dev)
    kv = cache_keyword(model)
    out = model(input_ids=ids, attention_mask=attn.long(), position_ids=positions(attn),
                use_cache=True)
    alive = torch.ones(B, dtype=torch.bool, device=dev)
    tokens, masks = [], []
    for t in range(T):
        z = out.logits[:, -1].float()                                      # (B, V)
        p = torch.softmax(z[alive] / tau, -1)                              # (A, V) live rows
        tok = torch.full((B,), pad_id, dtype=torch.long, device=dev)
        tok[alive] = torch.multinomial(p, 1, generator=generator)[:, 0]
        tokens.append(tok)
        masks.append(alive.clone())
        alive = alive & ~torch.isin(tok, stops)
        if t + 1 == T or not alive.any():
            break
        seen = torch.cat([attn, torch.ones(B, t + 1, dtype=torch.bool, device=dev)], 1)
        pos = attn.sum(-1, keepdim=True) + t                                # (B, 1)
        out = model(input_ids=tok[:, None], attention_mask=seen.long(), position_ids=pos,
                    use_cache=True, **{kv: output_cache(out)})
    return ids, attn, torch.stack(tokens, 1), torch.stack(masks, 1)       # (B, T')


# ---- 3. advantages ------------------------------------------------------------------------

def group_advantages(R: torch.Tensor, G: int, eps: float = GRPO_EPS) -> torch.Tensor:
    """GRPO's outcome advantage: each reward against its group's mean and spread.

    Source: GRPO (arXiv 2402.03300, sec. 4.1.2, outcome supervision).
    ``A_i = (R_i - mean_g R) / (std_g R + eps)``, ``std`` unbiased (``torch.std``), the ``G``
    responses of a prompt consecutive. A group of equal rewards gets 0.
    Shapes: R (B,) -> (B,), B = P * G.
    """
    Rg = R.view(-1, G)                                                     # (P, G)
    A = (Rg - Rg.mean(-1, keepdim=True)) / (Rg.std(-1, keepdim=True) + eps)
    return A.reshape(-1)                                                   # (B,)


# ---- 4. the trainer's forward -------------------------------------------------------------

def response_logp(model, ids: torch.Tensor, attn: torch.Tensor, response: torch.Tensor,
                  tau: float) -> torch.Tensor:
    """``log pi_theta(y_t | x, y_<t)`` of each response token: one full forward, no cache.

    ``logp_t = log softmax(z_{S+t-1} / tau)[y_t]``, the logits at the position before token t;
    differentiable (the update's gradient runs through it).
    Shapes: ids, attn (B, S), response (B, T) -> (B, T).
    """
    S, T = ids.shape[1], response.shape[1]
    seq = torch.cat([ids, response], 1)                                    # (B, S+T)
    seen = torch.cat([attn, torch.ones_like(response, dtype=torch.bool)], 1)
    z = model(input_ids=seq, attention_mask=seen.long(), position_ids=positions(seen),
              use_cache=False).logits[:, S - 1:S + T - 1]                  # (B, T, V)
    logp = torch.log_softmax(z.float() / tau, -1)                          # (B, T, V)
    return logp.gather(-1, response[..., None])[..., 0]                    # (B, T)


# ---- 5. the loss --------------------------------------------------------------------------

def grpo_loss(logp: torch.Tensor, logp_old: torch.Tensor, A: torch.Tensor, mask: torch.Tensor,
              eps_low: float, eps_high: float) -> torch.Tensor:
    """GRPO's clipped surrogate, to minimise, averaged over every response token of the batch.

    Source: GRPO (arXiv 2402.03300, eq. 3) without its KL term, averaged over tokens (DAPO,
    LOPTI's run scripts; the paper averages each response's tokens first, the engine's
    ``loss_agg="seq-mean-token-mean"``), asymmetric clip ``[1 - eps_low, 1 + eps_high]``.
    ``r_t = exp(logp_t - logp_old_t)``,
    ``L = -(1 / sum_i |y_i|) sum_{i,t} min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i)``.
    Shapes: logp, logp_old (B, T), A (B,), mask (B, T) bool -> scalar.
    """
    ratio = torch.exp(logp - logp_old.detach())                            # (B, T)
    A = A[:, None]                                                         # (B, 1)
    tok = -torch.minimum(ratio * A, ratio.clamp(1 - eps_low, 1 + eps_high) * A)  # (B, T)
    return torch.where(mask, tok, 0.0).sum() / mask.sum()


# ---- 6. the update ------------------------------------------------------------------------

@torch.no_grad()
def clip_grad_norm(params: list, max_norm: float) -> float:
    """Scale every gradient by ``min(1, max_norm / (||g|| + 1e-6))``, ``||g||`` the norm of all
    of them as one vector (torch's ``clip_grad_norm_``); returns ``||g||`` before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = (max_norm / (norm + CLIP_EPS)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale)
    return float(norm)


def adamw_state(params: list) -> dict:
    """AdamW's state before its first step: ``t = 0``, moments ``m = v = 0``."""
    return {"t": 0, "m": [torch.zeros_like(p) for p in params],
            "v": [torch.zeros_like(p) for p in params]}


@torch.no_grad()
def adamw_step(params: list, state: dict, lr: float, weight_decay: float,
               betas: tuple[float, float] = ADAM_BETAS, eps: float = ADAM_EPS) -> None:
    """One AdamW step on the parameters' ``.grad`` (Loshchilov & Hutter, arXiv 1711.05101).

    ``theta <- theta (1 - lr lambda)``; ``m <- beta1 m + (1 - beta1) g``;
    ``v <- beta2 v + (1 - beta2) g^2``;
    ``theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``,
    in ``torch.optim.AdamW``'s order of operations. A parameter without a gradient is skipped.
    """
    b1, b2 = betas
    state["t"] += 1
    t = state["t"]
    for p, m, v in zip(params, state["m"], state["v"]):
        if p.grad is None:
            continue
        p.mul_(1 - lr * weight_decay)
        m.lerp_(p.grad, 1 - b1)
        v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
        denom = (v.sqrt() / math.sqrt(1 - b2 ** t)).add_(eps)
        p.addcdiv_(m, denom, value=-lr / (1 - b1 ** t))


# ---- the step -----------------------------------------------------------------------------

def grpo_step(model, adam: dict, task: Task, problems: list[Problem], generator, *, G: int,
              T: int, tau: float, eps_low: float, eps_high: float, lr: float,
              weight_decay: float, max_grad_norm: float) -> dict:
    """One GRPO step on ``problems``: sample, reward, advantages, loss, clip, AdamW.

    ``adam``: :func:`adamw_state` of ``model.parameters()``, carried from step to step;
    ``generator``: the sampler's, carried too. The numbers are the run's (``TrainConfig``):
    ``G`` group size, ``T`` response cap, ``tau`` temperature, the clip, the optimiser's.
    Returns the step's ``response``, ``mask`` (B, T), rewards ``R`` (B,), advantages ``A`` (B,),
    ``loss`` and ``grad_norm`` (before clipping).
    """
    prompts = [p.prompt_ids for p in problems for _ in range(G)]          # B = P * G
    ids, attn, response, mask = sample(model, prompts, T, task.stop_ids, task.pad_id, tau,
                                       generator)
    R = torch.tensor([task.reward(problems[i // G], y).total for i, y in enumerate(response)],
                     dtype=torch.float64, device=mask.device)              # (B,)
    A = group_advantages(R, G).float()                                     # (B,)
    logp = response_logp(model, ids, attn, response, tau)                  # (B, T)
    loss = grpo_loss(logp, logp.detach(), A, mask, eps_low, eps_high)      # pi_old = pi_theta
    params = list(model.parameters())
    for p in params:
        p.grad = None
    loss.backward()
    grad_norm = clip_grad_norm(params, max_grad_norm)
    adamw_step(params, adam, lr, weight_decay)
    return {"response": response, "mask": mask, "R": R, "A": A, "loss": float(loss.detach()),
            "grad_norm": grad_norm}
