"""DVP on both sides: the sampler's kept vocabulary, handed unchanged to the trainer.

Source: DVP (P3). Pruning must use the same ``S`` on both sides, else every log-ratio is off by
``log pi(S|s)`` (:func:`tailtheory.pruning.vocab.truncation_log_ratio`). The kept set,
:func:`~tailtheory.core.safeset.dvp_keep`, lives in ``tailtheory/core/safeset.py`` with the rules
for ``S`` (the rollout, the trainer and the fused LM head all read it) and stays importable from
here; ``tailtheory/pruning/methods.py`` registers the ``dvp`` method.

Shapes: logits ``(B, T, V)``, tokens ``(B, T)``, kept set ``(B, T, V)`` bool.
"""

from __future__ import annotations

from tailtheory.core.safeset import dvp_keep

__all__ = ["dvp_keep"]
