"""tailtheory: executable evidence for the token-tail stability claims of LLM RL.

One subpackage per section of the claims (``softmax``, ``mismatch``, ``pruning``, ``lopti``,
``trm``, ``otb``, ``engine``; shared code in ``core``), each with its theory modules, its
registered checks (``claims.py``) and figures (``figures.py``); its docstring is a paper card.
Theory modules compute each quantity exactly and each bound as its own function;
:mod:`tailtheory.core.registry` registers a check per claim id of ``docs/claims.md``.
"""

__version__ = "0.1.0"
