"""tailtheory: executable evidence for the token-tail stability claims of LLM RL.

Theory modules (one per paper or bound family) compute each quantity exactly and each bound as
its own function; :mod:`tailtheory.core.registry` registers a check per claim id of THEORY.md.
"""

__version__ = "0.1.0"
