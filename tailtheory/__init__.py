"""tailtheory: executable evidence for the token-tail stability claims of LLM RL.

One subpackage per section of the claims (``softmax``, ``mismatch``, ``pruning``, ``lopti``,
``trm``, ``otb``, ``tim``), each with its theory modules, its registered checks (``claims.py``)
and figures (``figures.py``); its docstring is a paper card. Below them ``core`` (shared
quantities, the claims registry, stored measurements), ``engine`` (the GRPO engine) and
``experiments`` (the studies every training claim reads, all on the learning testbed); above
them the front ends (``cli``, ``catalog``, ``docs``, ``diagnose``, ``integrations``, ``ladder``,
``probe``, ``regime``). Theory modules compute each quantity exactly and each bound as its own
function; :mod:`tailtheory.core.registry` registers a check per claim id of ``docs/claims.md``.

Modules and folders, one line each (every package's ``__init__.py`` maps its own the same way;
``docs/contributing.md`` shows them all):

- ``core/``: what every section shares: validation, exact tabular policies, estimators, the
  claims registry, stored measurements, output.
- ``engine/``: the GRPO engine on Hugging Face causal LMs: the training step, one run's
  plumbing, and its wings (rollout, tasks, start); knows no paper.
- ``experiments/``: training studies as values, the run cache and its store, presets, recipes
  and the recipes' shared policies; knows no paper.
- ``softmax/``: S1-S5: the score of a sampled token and its (1 - p) wedge.
- ``mismatch/``: M1-M7: training-inference mismatch of token log-probabilities and its (1 - p)
  law.
- ``pruning/``: P1-P5: dynamic vocabulary pruning, its exact cost and what it buys.
- ``lopti/``: L1-L6: low-probability tokens dominate the update, and LOPTI's two remedies.
- ``trm/``: T1-T14: trust regions over long horizons, exact errors, bounds, sequence masking.
- ``otb/``: O1-O6: the optimal token baseline, its exact variances and finite groups.
- ``tim/``: V1-V6: training-inference mismatch in GRPO training and TIM's remedies.
- ``catalog``: every section's claims, methods and studies, collected in one place.
- ``cli``: the ``tailtheory`` command line.
- ``docs``: ``docs/claims.md`` and the module maps of ``docs/contributing.md``, generated from
  the code (``python -m tailtheory.docs``).
- ``diagnose/``: ``tailtheory diagnose``: the token-tail claims measured on a real run's
  per-token dumps.
- ``integrations/``: the methods inside TRL and verl, and per-token dumps of their runs.
- ``ladder/``: the model-size ladder: each claim's effect at growing sizes, and the trend rule.
- ``probe/``: ``tailtheory probe``: the per-model probes on any checkpoint.
- ``regime/``: how far the testbed is from each paper, quantity by quantity.
"""

__version__ = "0.1.0"
