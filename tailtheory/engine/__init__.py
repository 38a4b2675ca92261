"""A small GRPO engine on Hugging Face causal LMs with a real training-inference mismatch.

The engine room holds the training step and one run's plumbing; three wings hold the rest.
Modules, one line each (``tests/engine/`` mirrors them, ``test_<module>.py`` per module).

The step:

- ``config``: ``TrainConfig``, every knob of a GRPO run, frozen, each default with its source;
  validated once, when it is built.
- ``trainer``: the loop: rollout, reward, advantages, ``pi_old``, update(s), metrics.
- ``update_plan``: the step's plan between the ``pi_old`` forward and the updates (advantages,
  correction weights, passes, the loss mask), one pass's loss, and the first pass that needs no
  ``pi_old`` value.
- ``types``: the batch and parameter types (``PolicyBatch``, ``MethodParams``) and the one
  signature every method has (``MethodFn``).
- ``registry``: the method registry: GRPO-family policy losses and every correction, by stage.
- ``methods``: the engine's own losses: the clipped surrogate, its aggregations, the ``grpo`` and
  ``dr_grpo`` losses, TRM's sampled-token acceptance monitor.
- ``advantages``: the group advantages GRPO, Dr. GRPO and RLOO.
- ``policy_forward``: the trainer's own forward over a rollout batch: response logits, hidden
  states, log-probs (the ``exact`` rollout path calls it too).
- ``forward_stats``: the trainer's per-token statistics over a rollout batch, whole or in
  micro-batches, through the fused LM head or the full logits.
- ``step_metrics``: the numbers of a step that no method reports: the keys of ``metrics.jsonl``.
- ``reference``: the step of plain GRPO in one file of plain torch, for reading (the trainer's
  ``train_step`` is what runs; a test holds the two to the same tokens and numbers).

One run's plumbing:

- ``load``: what a run starts from: the model (a warm start, a tiny random LM or a user's
  folder), the task speaking its tokenizer, and their record (``provenance.json``).
- ``checkpoint``: model, optimiser, every RNG state, the step and the config, written
  atomically; ``metrics.jsonl`` cut back to the checkpoint's step on resume.
- ``rundir``: a run's folder: what ``--out`` may be, one writer at a time (locked), nothing of an
  earlier run deleted.
- ``threads``: how many CPU threads torch uses for a training command.
- ``devices``: where the engine runs: ``auto``, ``cpu`` or ``cuda``.
- ``evaluate``: held-out accuracy during RL, sampled on problems no run trains on.

The wings:

- ``rollout/``: the rollout engine (:mod:`tailtheory.engine.rollout.engine`) and its decoders
  (``fast``, ``hf``), the inference copies and the noise paths.
- ``tasks/``: tasks as text (:mod:`tailtheory.engine.tasks.task`), their words, lengths and a
  model's chat conventions.
- ``start/``: the models runs start from: supervised warm starts and their cache, the corpus LM
  and its pretraining, the model-size ladder's rungs, a user's checkpoint warm-started.

The engine imports no paper section and nothing from :mod:`tailtheory.experiments`: each
section registers its own methods in ``tailtheory/<section>/methods.py``, which the package's
catalog (:mod:`tailtheory.catalog`) imports; what the engine shares with the papers (DVP's safe
set, the k1/k2/k3 estimators and TRM's filter) lives in ``core``. ``tailtheory methods`` lists
the registered methods; ``tailtheory train`` runs the loop.
"""
