"""The ``hf`` rollout backend: the Hugging Face model's own KV-cache forward, one token a step.

Source: TIM (V2: incremental decoding is another reduction order than the trainer's full
forward, the ``kv`` path's mismatch). :class:`HFDecode` is the decoding state
``RolloutEngine._decode`` (``tailtheory.engine.rollout.engine``) samples from, beside the ``fast``
backend's (``tailtheory.engine.rollout.fast``): the next-token :attr:`~HFDecode.logits` of the rows
:attr:`~HFDecode.rows` (``None``: every row, every step; finished rows too, the engine replaces
their tokens by ``pad_id``) and :meth:`~HFDecode.advance`, which feeds the sampled tokens.

Shapes: ``B`` rows, ``P`` left-padded prompt columns, ``T`` new tokens at most, ``V`` vocabulary.
"""

from __future__ import annotations

import torch

from tailtheory.core.forward import position_ids
from tailtheory.core.models import cache_keyword, output_cache


def decode_mask(model, full: torch.Tensor) -> torch.Tensor:
    """The attention mask of one decode step of ``model``, built once per rollout.

    With eager attention: the additive ``(B, 1, 1, P+T)`` mask that the model would build from
    ``full`` at every step (a one-token query sees every cached position but the prompt
    padding; 0 there, the dtype's minimum on padding), which it takes as is. Otherwise the 2-D
    mask ``full (B, P+T)`` itself. Sliced to ``P + t + 1`` columns at step ``t``.
    """
    if getattr(model.config, "_attn_implementation", None) != "eager":
        return full
    dtype = next(model.parameters()).dtype
    bias = torch.zeros(full.shape[0], 1, 1, full.shape[1], dtype=dtype, device=full.device)
    return bias.masked_fill_(full[:, None, None, :] == 0, torch.finfo(dtype).min)


class HFDecode:
    """The ``hf`` backend's state: ``model``'s own KV-cache forward over all ``B`` rows.

    ``ids (B, P)`` left-padded prompts, ``attn (B, P)`` their mask, ``lens (B,)`` their true
    lengths; room for ``T`` new tokens. The prompts are prefilled on construction.
    """

    rows = None  # every row, every step

    def __init__(self, model, ids, attn, lens, T: int):
        B, P = ids.shape
        full = torch.ones(B, P + T, dtype=torch.long, device=ids.device)  # prompt mask, then 1s
        full[:, :P] = attn
        self.step_mask = decode_mask(model, full)              # (B, 1, 1, P+T) or (B, P+T)
        self.infer, self.lens, self.P, self.t = model, lens, P, 0
        self.cache_kw = cache_keyword(model)
        self.out = self.infer(input_ids=ids, attention_mask=full[:, :P],
                              position_ids=position_ids(attn), use_cache=True)

    @property
    def logits(self) -> torch.Tensor:
        return self.out.logits[:, -1]                                     # (B, V)

    def advance(self, tok: torch.Tensor, alive: torch.Tensor) -> None:
        """Feed ``tok (B,)``, one token per row (``alive`` is unused: every row is fed)."""
        pos = (self.lens + self.t)[:, None]      # = position_ids of the mask grown by one column
        self.t += 1
        mask = self.step_mask[..., :self.P + self.t]
        self.out = self.infer(input_ids=tok[:, None], attention_mask=mask, position_ids=pos,
                              use_cache=True, **{self.cache_kw: output_cache(self.out)})
