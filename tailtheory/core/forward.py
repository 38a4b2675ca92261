"""The trainer's forward of a causal LM, written once, with its padding helpers.

Every trainer-side logit of the package (the M7 pairs of ``tailtheory.mismatch.real``, the
trainer and the ``exact`` path of ``tailtheory.engine.rollout.engine``) comes from :func:`full_forward`:
one float32 pass over the whole sequence, no KV cache. Prompts are left-padded
(:func:`left_pad`), and positions count from each row's first real token (:func:`position_ids`),
so a padded row computes what it would compute alone. :func:`hidden_forward` is the same pass
stopped before the LM head, and :func:`lm_head` the head's weights: with them
``tailtheory.core.fused.fused_token_stats`` gives the per-token statistics without the
``(B, T, V)`` logits.
"""

from __future__ import annotations

import torch


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first real token (left padding gets 0).

    Shapes: attention_mask (B, T) bool -> (B, T) long.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def left_pad(prompts: list[list[int]], pad_id: int, vocab_size: int):
    """``(ids (B, P), attention_mask (B, P) bool, lens (B,))`` of left-padded prompts."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of token-id lists")
    lens = [len(p) for p in prompts]
    if min(lens) < 1:
        raise ValueError(f"prompts must each hold at least one token; prompt {lens.index(0)} "
                         f"is empty")
    P = max(lens)
    ids = torch.full((len(prompts), P), int(pad_id), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p):] = torch.as_tensor(p, dtype=torch.long)
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(f"prompts and pad_id must lie in [0, {vocab_size}) (the model's "
                         f"vocabulary); got range [{int(ids.min())}, {int(ids.max())}]")
    attn = torch.arange(P).unsqueeze(0) >= (P - torch.as_tensor(lens)).unsqueeze(1)  # (B, P)
    return ids, attn, torch.as_tensor(lens)


def full_forward(model, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor | None = None,
                 keep: torch.Tensor | None = None) -> torch.Tensor:
    """The logits of one full forward over ``input_ids``, no KV cache: the trainer's pass.

    Without ``attention_mask`` every token is real (the model's own causal mask and positions
    ``0..T-1``); with it, padded positions are masked and positions follow :func:`position_ids`.
    ``keep`` (positions, 1-D): the LM head runs on those positions only (the model's
    ``logits_to_keep``; a model without it raises). Differentiable when grad is enabled; the
    logits keep the model's dtype.

    Shapes: input_ids (B, T), attention_mask (B, T) bool or None, keep (K,) -> (B, T or K, V).
    """
    extra = {} if keep is None else {"logits_to_keep": keep}
    if attention_mask is None:
        return model(input_ids=input_ids, use_cache=False, **extra).logits     # (B, T, V)
    return model(input_ids=input_ids, attention_mask=attention_mask.long(),
                 position_ids=position_ids(attention_mask), use_cache=False, **extra).logits


_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier",
                     "lm_head_multiplier", "logits_scaling")
"""Config fields with which a model changes its logits after the LM head's matrix product."""


def logit_transforms(model) -> dict:
    """The config fields with which ``model`` scales or soft-caps its logits after the LM head
    (Gemma's softcapping, Granite's ``logits_scaling``, ...); empty when its logits are
    ``h W^T + b``."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") \
        else model.config
    return {n: getattr(config, n) for n in _LOGIT_TRANSFORMS
            if getattr(config, n, None) not in (None, 1, 1.0)}


def lm_head(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The LM head's weight ``(V, H)`` and bias ``(V,)`` or None, for the fused statistics.

    Refuses a model with :func:`logit_transforms`: there ``h W^T + b`` is not its logits.
    """
    odd = logit_transforms(model)
    if odd:
        raise ValueError(f"model's logits are not h W^T + b: its config sets {odd}; use "
                         f"full_forward and tailtheory.core.stats.token_stats instead")
    head = model.get_output_embeddings()
    return head.weight, getattr(head, "bias", None)


def hidden_forward(model, input_ids: torch.Tensor,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The last hidden states of :func:`full_forward`'s pass, before the LM head.

    ``full_forward(...) = hidden_forward(...) @ W^T + b`` with ``(W, b) = lm_head(model)`` (up to
    the rounding of the product); :func:`tailtheory.core.fused.fused_token_stats` takes it from
    there without the ``(B, T, V)`` logits. Masks and positions as in :func:`full_forward`.

    Shapes: input_ids (B, T), attention_mask (B, T) bool or None -> (B, T, H).
    """
    backbone = model.get_decoder()
    if attention_mask is None:
        return backbone(input_ids=input_ids, use_cache=False).last_hidden_state  # (B, T, H)
    return backbone(input_ids=input_ids, attention_mask=attention_mask.long(),
                    position_ids=position_ids(attention_mask),
                    use_cache=False).last_hidden_state
