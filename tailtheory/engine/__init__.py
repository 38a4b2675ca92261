"""A small GRPO engine on Hugging Face causal LMs with a real training-inference mismatch.

Modules: ``tasks`` / ``tokenizer`` / ``sft`` (problems as text, rewards read from decoded text,
warm start), ``start`` (the model a run starts from, with its tokenizer, checked), ``rollout`` (the
inference copy and its sampler), ``types`` / ``registry`` / ``methods`` / ``advantages`` (the
batch and parameter types, the method registry, the engine's own losses, the group advantages),
``config`` / ``trainer`` / ``checkpoint`` (the loop). The engine imports no paper section: each
section registers its own methods in ``tailtheory/<section>/methods.py`` (``lopti``, ``tim``,
``trm``, ``pruning``, ``otb``), which the registry finds by name; what the engine shares with
the papers (DVP's safe set, the k1/k2/k3 estimators and TRM's filter) lives in ``core``.
``tailtheory methods`` lists the registered methods; ``tailtheory train`` runs the loop.

Experiments: ``study`` (arms selected by tags, one comparison rule), ``runs`` (the run cache and
the one runner, which records each run's CPU time), ``incremental`` (every study's store,
``results/<name>.json``, run by run), ``presets`` / ``recipes`` (where runs start; ``learn`` is
the learning testbed every training claim reads) and ``learning`` (does GRPO learn there?).
"""
