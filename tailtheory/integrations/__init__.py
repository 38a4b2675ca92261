"""tailtheory's methods inside other RL frameworks.

Modules, one line each (``tests/integrations/`` mirrors them):

- ``trl``: ``TailGRPOConfig`` / ``TailGRPOTrainer``, TRL 1.16's ``GRPOTrainer`` with the engine's
  methods applied through its extension points (install the ``trl`` extra:
  ``pip install -e '.[trl]'``).
- ``trl_checks``: the TRL 1.16 settings ``TailGRPOTrainer`` cannot express, each a
  ``ValueError`` naming the knob, checked once by ``TailGRPOConfig``.
- ``trl_task``: a tailtheory task as TRL data: prompts, answers and the task's own reward, in a
  user's checkpoint's tokenizer.
- ``trl_dump``: per-token dumps of a TRL run for ``tailtheory diagnose``
  (``DumpingGRPOTrainer`` / ``TokenDumpMixin``, through TRL's public ``compute_loss``; needs
  vLLM or a ``rollout_func`` with log-probs, else a ``ValueError`` at construction).
- ``verl``: a plugin that registers the methods with verl 0.9.1's policy-loss and
  advantage-estimator registries (``external_lib`` route).
- ``verl_dump``: per-token dumps of a verl run (``dump_batch`` on a verl ``DataProto``).
- ``dump``: what both dump hooks write through, framework-free: per-token records in the
  generic format of ``tailtheory diagnose``.

Neither framework is imported here: each module imports its own, so this package imports
without them. The methods' formulas are the engine's (``tailtheory.engine.registry``); the
adapters only move data between the framework's batches and :class:`~tailtheory.engine.types.
PolicyBatch`. Sources: LOPTI (arXiv 2505.12929), DVP (arXiv 2512.23087), TRM (arXiv
2512.23075), OTB (arXiv 2602.07078), TIM (arXiv 2605.14220).
"""
