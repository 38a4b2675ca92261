"""DVP on both sides: the sampler's kept vocabulary, handed unchanged to the trainer.

Source: DVP (P3). Pruning must use the same ``S`` on both sides, else every log-ratio is off by
``log pi(S|s)`` (:func:`tailtheory.pruning.vocab.truncation_log_ratio`). The rules for ``S`` live
in ``tailtheory/pruning/vocab.py``; ``tailtheory/engine/methods.py`` registers ``dvp``.

Shapes: logits ``(B, T, V)``, tokens ``(B, T)``, kept set ``(B, T, V)`` bool.
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import check_finite, check_tokens
from tailtheory.pruning.vocab import safe_vocab_mask


def dvp_keep(roll_logits: torch.Tensor, tokens: torch.Tensor, rule: str, rho: float,
             temperature: float = 1.0) -> torch.Tensor:
    """The sampler's kept vocabulary ``S``, to be used unchanged by the trainer.

    Source: DVP (P3). ``S = safe_vocab_mask(roll_logits / tau, rule, rho)``; the sampled token
    is always kept (a sampler that pruned on its own logits can only have sampled inside ``S``).
    Shapes: roll_logits (B, T, V), tokens (B, T) -> (B, T, V) bool.
    """
    check_finite(roll_logits, "roll_logits")
    tokens = check_tokens(tokens, roll_logits, "tokens")
    keep = safe_vocab_mask(roll_logits.detach().double() / temperature, rule, rho)
    return keep.scatter(-1, tokens.long().unsqueeze(-1), True)


__all__ = ["dvp_keep"]
