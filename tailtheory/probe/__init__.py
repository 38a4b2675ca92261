"""``tailtheory probe``: the per-model probes on any checkpoint, from the command line and the
notebooks.

The probe families:

- family ``mismatch`` (M7 / V2): the real ``bf16``, ``fp16`` and ``kv`` mismatch ``|Delta|`` of
  every token against ``1 - p`` (:mod:`tailtheory.mismatch.chunked`); notebook 01's figure (1).
  With ``--attribute``: each knob's mismatch (bf16, fp16, KV cache, batch shape, attention
  kernel) alone and combined against one float32 reference, with the interaction residual
  (:mod:`tailtheory.probe.attribute`).
- family ``pruning`` (P4): DVP's min-p sweep on the ``bf16`` mismatch, and where the mismatch
  sits against the sampler's mass (:mod:`tailtheory.pruning.chunked`); notebook 01's figure (4)
  and notebook 05's mass shares.
- family ``gradient`` (L1, L4, L5): LOPTI's Figures 1 and 3 on one batch
  (:mod:`tailtheory.lopti.text_probe`); notebook 04's section (1).
- family ``decisiveness``: which of a policy's low-probability tokens decide its answer, on one
  GRPO batch of a task (:mod:`tailtheory.lopti.decisive.probe`).

For the first three, the text is ``B`` windows of ``L`` tokens of the standard library's
held-out source, read with the checkpoint's own tokenizer
(:mod:`tailtheory.engine.start.text_windows`); ``decisiveness`` samples a task's batch from a
checkpoint folder or a recipe's policy.

Modules, one line each:

- ``run``: one probe family on one checkpoint: what the command and the notebooks share
  (:func:`~tailtheory.probe.run.run_probe`, ``write_result``).
- ``decisive``: the ``decisiveness`` family: the probe, its figures, tables and record.
- ``attribute``: ``mismatch --attribute``: the arms, their table, the residual and the figure.
- ``cli``: the command, ``tailtheory probe FAMILY --model PATH``.
"""
