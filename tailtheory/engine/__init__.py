"""A small GRPO engine on Hugging Face causal LMs with a real training-inference mismatch.

Modules: ``tasks`` / ``tokenizer`` / ``sft`` (problems, rewards, warm start), ``stats`` /
``rollout`` / ``probes`` (per-token statistics, the inference copy, probes), ``masks`` /
``losses`` / ``methods`` (the method registry), ``config`` / ``trainer`` / ``checkpoint`` (the
loop). ``tailtheory methods`` lists the registered methods; ``tailtheory train`` runs the loop.
"""
