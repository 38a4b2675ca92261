"""A small GRPO engine on Hugging Face causal LMs with a real training-inference mismatch.

The engine room holds the training step and one run's plumbing; three wings hold the rest:

- the step: ``config`` / ``trainer`` (the loop) / ``update_plan`` (advantages, weights and
  passes between the ``pi_old`` forward and the updates), ``types`` / ``registry`` / ``methods`` /
  ``advantages`` (the batch and parameter types, the method registry, the engine's own losses,
  the group advantages), ``policy_forward`` / ``forward_stats`` / ``step_metrics`` (the
  trainer's forward, its per-token statistics, the step's metrics);
- one run's plumbing: ``checkpoint``, ``rundir`` (a run's folder, locked), ``threads``,
  ``devices``, ``evaluate``;
- ``reference``: the step of plain GRPO in one file of plain torch, for reading (the trainer's
  ``train_step`` is what runs; a test holds the two to the same tokens and numbers);
- :mod:`tailtheory.engine.rollout.engine`: the rollout engine and its decoders (``fast``, ``hf``),
  the inference copies and the noise paths;
- :mod:`tailtheory.engine.tasks.task`: tasks as text, their words and lengths;
- :mod:`tailtheory.engine.load`: the model a run starts from (load, sft, warm starts, the
  corpus LM).

The engine imports no paper section and nothing from :mod:`tailtheory.experiments`: each
section registers its own methods in ``tailtheory/<section>/methods.py``, which the package's
catalog (:mod:`tailtheory.catalog`) imports; what the engine shares with the papers (DVP's safe
set, the k1/k2/k3 estimators and TRM's filter) lives in ``core``. ``tailtheory methods`` lists
the registered methods; ``tailtheory train`` runs the loop.
"""
