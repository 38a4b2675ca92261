"""tailtheory: executable evidence for the token-tail stability claims of LLM RL.

One subpackage per section of the claims (``softmax``, ``mismatch``, ``pruning``, ``lopti``,
``trm``, ``otb``, ``tim``), each with its theory modules, its registered checks (``claims.py``)
and figures (``figures.py``); its docstring is a paper card. Below them ``core`` (shared
quantities, the claims registry, stored measurements) and ``engine`` (the GRPO engine and the
studies every training claim reads, all on the learning testbed); above them the front ends
(``cli``, ``probe``, ``diagnose``, ``integrations``). Theory modules compute each quantity
exactly and each bound as its own function; :mod:`tailtheory.core.registry` registers a check per
claim id of ``docs/claims.md``.
"""

__version__ = "0.1.0"
