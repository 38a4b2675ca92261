"""DVP's shared kept set as the pruning section names it (``tailtheory/pruning/sampler.py``,
claim P3): the one of ``tailtheory.core.safeset``, which the rollout, the trainer's ``dvp``
method and the fused LM head read. Its behaviour is tested in ``tests/core/test_safeset.py``;
the trainer-side check (the trainer renormalises over the same ``S``) is
``tests/engine/test_methods.py``."""

from __future__ import annotations

from tailtheory.core import safeset
from tailtheory.pruning import sampler, vocab


def test_the_section_names_the_core_safe_set_P3():
    """One kept set, one rule set: the section's names are the core's objects, not copies."""
    assert sampler.dvp_keep is safeset.dvp_keep
    assert vocab.safe_vocab_mask is safeset.safe_vocab_mask
    assert vocab.RULES is safeset.RULES and vocab.RHO_DEFAULT == safeset.RHO_DEFAULT
