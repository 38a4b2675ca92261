"""Held-out accuracy during RL: the policy's sampled accuracy on problems no run trains on.

The held-out problems are the warm start's (generator seed :data:`EVAL_SEED`): the supervised
warm start never trained on them and RL draws its problems from another stream
(``trainer.PROBLEM_SEED``). Sampling uses the float32 ``kv`` path at the run's temperature with
its own generator, so evaluating never moves the training's random stream.
"""

from __future__ import annotations

from functools import lru_cache
from tailtheory.engine.start.sft import sampled_accuracy

EVAL_SEED = 101
"""Generator seed of the held-out problems (``SFTConfig.eval_seed``)."""


@lru_cache(maxsize=8)
def _held_out(task, n: int) -> tuple:
    return tuple(task.problems(n, seed=EVAL_SEED))


def held_out_accuracy(model, task, n: int, temperature: float, seed: int, backend: str) -> float:
    """Fraction of ``n`` held-out problems the sampled response (at ``temperature``) gets right,
    sampled on the float32 path of rollout ``backend`` (the run's)."""
    was_training = model.training
    try:
        return sampled_accuracy(model.eval(), task, list(_held_out(task, n)), temperature,
                                seed=seed, backend=backend)
    finally:
        model.train(was_training)
