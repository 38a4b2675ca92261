"""The rollout wing: how a policy's responses are sampled, and by which decoder.

- ``engine``: the rollout engine (:class:`~tailtheory.engine.rollout.engine.RolloutEngine`), its
  configuration and the batch it returns; it picks a decoder and a weight path.
- ``fast``: the ``fast`` decoder, the engine's own KV-cache loop over the model's weights.
- ``families``: the model families the ``fast`` decoder runs, and the config fields it checks.
- ``hf``: the ``hf`` decoder, Hugging Face's own forward with its cache (the slow reference).
- ``copies``: the inference copies of the weights (bf16, fp16, fp8) that make the real
  training-inference mismatch.
- ``noise``: the injected-noise paths (a known mismatch of a chosen size).

This wing imports nothing above the policy forward (:mod:`tailtheory.engine.policy_forward`).
"""
