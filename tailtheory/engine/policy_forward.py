"""The trainer's own forward over a rollout batch: response logits, hidden states, log-probs.

Source: TIM (V1). The single place the policy's forward over a
:class:`~tailtheory.engine.rollout.engine.RolloutBatch` (prompt + response, left-padded) is written: the
trainer (``tailtheory.engine.forward_stats``) and the ``exact`` rollout path
(``tailtheory.engine.rollout.engine``) both call it, which is what makes V1 hold bitwise. One float32
full forward (:func:`tailtheory.core.forward.full_forward`), or the fused LM head
(:mod:`tailtheory.core.fused`) from :data:`FUSED_MIN_VOCAB` on.

Shapes: ``B`` rows, ``P`` prompt columns, ``T`` response tokens, ``H`` hidden, ``V`` vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch

from tailtheory.core.forward import full_forward
from tailtheory.core.forward import hidden_forward, lm_head, logit_transforms
from tailtheory.core.fused import fused_token_stats
from tailtheory.core.stats import token_stats


def response_logits(model, rb) -> torch.Tensor:
    """The trainer's logits at every response position: one float32 full forward.

    The single place the trainer's forward is written; the trainer and the ``exact`` path both
    go through it, which is what makes V1 hold bitwise.

    Shapes: rb.input_ids (B, P+T) -> (B, T, V).
    """
    P, T = rb.prompt_len, rb.response.shape[1]
    if not takes_logits_to_keep(model):
        return full_forward(model, rb.input_ids, rb.attention_mask)[:, P - 1:P + T - 1]
    keep = torch.arange(P - 1, P + T - 1, device=rb.input_ids.device)
    return full_forward(model, rb.input_ids, rb.attention_mask, keep)              # (B, T, V)


def takes_logits_to_keep(model) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (Hugging Face causal LMs since 4.45):
    then the LM head runs on the response positions only, not on the prompt's. Measured on the
    ``matched`` recipe's update (64-row micro-batches of 165 positions, 134 of them response,
    V = 4,096): the head's matrix products shrink by the prompt's share and the ``(B, P + T, V)``
    zeros that the backward of a slice of the logits fills are gone."""
    import inspect

    return "logits_to_keep" in inspect.signature(type(model).forward).parameters


FUSED_MIN_VOCAB = 32_000
"""The trainer's forward goes through the fused LM head (:mod:`tailtheory.core.fused`) from this
vocabulary size on. Measured (``benchmarks/bench_fused.py``, forward + backward of a tiny model,
one thread): a tie at V = 512 (0.064 s against 0.063 s) and 0.48x the full-logits time at
V = 151,936, with no ``(B, T, V)`` logits held; below this size the logits are small and the
full-logits path keeps its bitwise regression records."""


def use_fused_head(model) -> bool:
    """Whether the trainer's forward (and the ``exact`` path's, V1) uses the fused LM head: a
    vocabulary of at least :data:`FUSED_MIN_VOCAB` and logits that are ``h W^T + b``."""
    V = model.get_output_embeddings().weight.shape[0]
    return V >= FUSED_MIN_VOCAB and not logit_transforms(model)


def response_hidden(model, rb) -> torch.Tensor:
    """The trainer's last hidden states at every response position. (B, P+T) -> (B, T, H)."""
    P, T = rb.prompt_len, rb.response.shape[1]
    return hidden_forward(model, rb.input_ids, rb.attention_mask)[:, P - 1:P + T - 1]


def fused_response_stats(model, rb, temperature: float = 1.0,
                         keep: Any = None) -> dict:
    """:func:`tailtheory.core.fused.fused_token_stats` of the response: the statistics of
    ``token_stats(response_logits(...))`` without the logits (no ``kl``: it needs them)."""

    W, bias = lm_head(model)
    return fused_token_stats(response_hidden(model, rb), W, rb.response, bias, mask=rb.mask,
                             keep=keep, temperature=temperature)


def response_logprobs(model, rb, temperature: float = 1.0,
                      keep: Any = None) -> torch.Tensor:
    """The trainer's log-probs of the sampled response.

    Source: TIM (V1: the ``exact`` rollout path calls this very function, so its log-probs are
    bitwise the trainer's). ``logp_t = log softmax_S(z_{P+t-1} / tau)[y_t]``; differentiable when
    grad is enabled. ``keep`` is the kept vocabulary (use ``rb.keep``: same ``S`` as the sampler).

    Through the fused LM head when :func:`use_fused_head`, as the trainer's forward.

    Shapes: rb.input_ids (B, P+T) -> (B, T).
    """
    if use_fused_head(model):
        return fused_response_stats(model, rb, temperature, keep)["logp"]
    z = response_logits(model, rb)
    return token_stats(z, rb.response, keep=keep, temperature=temperature)["logp"]
