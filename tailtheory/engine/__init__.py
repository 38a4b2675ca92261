"""A small GRPO engine on Hugging Face causal LMs with a real training-inference mismatch.

Modules: ``tasks`` / ``tokenizer`` / ``sft`` (problems, rewards, warm start), ``rollout`` (the
inference copy and its sampler), ``types`` / ``registry`` / ``methods`` (the batch and parameter
types, the method registry, the registered methods), ``config`` / ``trainer`` / ``checkpoint``
(the loop). The formulas the methods call live with their papers (``mismatch``, ``lopti``,
``pruning``, ``trm``, ``otb``). ``tailtheory methods`` lists the registered methods;
``tailtheory train`` runs the loop.
"""
