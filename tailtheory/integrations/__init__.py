"""tailtheory's methods inside other RL frameworks.

- :mod:`tailtheory.integrations.trl`: ``TailGRPOConfig`` / ``TailGRPOTrainer``, TRL 1.16's
  ``GRPOTrainer`` with the engine's methods applied through its extension points (install the
  ``trl`` extra: ``pip install -e '.[trl]'``).
- :mod:`tailtheory.integrations.verl`: a plugin that registers the methods with verl 0.9.1's
  policy-loss and advantage-estimator registries (``external_lib`` route).
- per-token dumps for ``tailtheory diagnose``: :mod:`tailtheory.integrations.trl_dump`
  (``DumpingGRPOTrainer`` / ``TokenDumpMixin``, through TRL's public ``compute_loss``; needs
  vLLM or a ``rollout_func`` with log-probs, else a ``ValueError`` at construction) and
  :mod:`tailtheory.integrations.verl_dump` (``dump_batch`` on a verl ``DataProto``), both writing
  the generic format through :mod:`tailtheory.integrations.dump`.

Neither framework is imported here: each module imports its own, so this package imports
without them. The methods' formulas are the engine's (``tailtheory.engine.registry``); the
adapters only move data between the framework's batches and :class:`~tailtheory.engine.types.
PolicyBatch`. Sources: LOPTI (arXiv 2505.12929), DVP (arXiv 2512.23087), TRM (arXiv
2512.23075), OTB (arXiv 2602.07078), TIM (arXiv 2605.14220).
"""
