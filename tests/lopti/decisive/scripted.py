"""A scripted policy whose decisiveness is known exactly: the check :mod:`tailtheory.lopti.decisive.branches`
must pass before its numbers are trusted anywhere else.

On the ``kk`` task (Knights and Knaves answered directly: ``n`` words ``T`` / ``F``, then EOS;
reward 1 for the right answer, 0.1 for a wrong well-formed one) the scripted policy writes each
person's right value with probability ``1 - eps`` and the other value with ``eps`` (the planted
error rate), then EOS. With ``m`` people still to answer after position ``j``, a right prefix
has ``Q(right) = (1 - eps)^m + 0.1 (1 - (1 - eps)^m)`` and ``Q(wrong) = 0.1``; after one error
every continuation earns 0.1, so no later token moves the reward (:func:`exact_decisiveness`).
"""

from __future__ import annotations

import numpy as np
import torch

from tailtheory.engine.tasks.task import FORMAT_REWARD


class ScriptedPolicy:
    """The policy of the module docstring on ``task`` (a ``kk`` task) for ``problems``: a
    decoder (``start(ids, attn, T)``) :func:`~tailtheory.lopti.decisive.branches.branch_values` takes.
    The rows' prompts must be those of ``problems``."""

    def __init__(self, task, problems, eps: float):
        if not 0 < eps < 1:
            raise ValueError(f"eps must lie in (0, 1), got {eps!r}")
        self.task, self.eps = task, float(eps)
        self.answers = {tuple(p.prompt_ids): task.encode(" " + p.answer) for p in problems}
        self.T_id, self.F_id = (task.encode(" " + w)[0] for w in ("T", "F"))

    def start(self, ids: torch.Tensor, attn: torch.Tensor, T: int) -> "_State":
        return _State(self, [ids[b][attn[b]].tolist() for b in range(len(ids))])

    def logits(self, seq: list[int]) -> torch.Tensor:
        """Next-token logits (log-probabilities, ``-inf`` off the support) after ``seq``."""
        for n in range(len(seq), 0, -1):
            answer = self.answers.get(tuple(seq[:n]))
            if answer is not None:
                break
        else:
            raise ValueError("a row's prompt is none of the scripted problems'")
        j = len(seq) - n
        z = torch.full((self.task.vocab_size,), float("-inf"))
        if j < len(answer):
            right = answer[j]
            other = self.F_id if right == self.T_id else self.T_id
            z[right], z[other] = np.log1p(-self.eps), np.log(self.eps)
        else:
            z[self.task.eos_id] = 0.0
        return z


class _State:
    rows = None

    def __init__(self, policy: ScriptedPolicy, seqs: list[list[int]]):
        self.policy, self.seqs = policy, seqs
        self.logits = torch.stack([policy.logits(s) for s in seqs])

    def advance(self, tokens: torch.Tensor, alive: torch.Tensor) -> None:
        for b, s in enumerate(self.seqs):
            s.append(int(tokens[b]))
        self.logits = torch.stack([self.policy.logits(s) for s in self.seqs])


def exact_decisiveness(policy: ScriptedPolicy, problem, response: list[int], t: int) -> dict:
    """``p``, ``gap = Q(y_t) - Q(not y_t)`` and ``D`` of token ``t`` of ``response`` to
    ``problem`` under ``policy``, exactly (module docstring; ``gap`` NaN at EOS, where no
    other token has mass)."""
    answer = policy.answers[tuple(problem.prompt_ids)]
    n, eps = len(answer), policy.eps
    if t >= n:                                         # EOS: the only token with mass
        return {"p": 1.0, "gap": float("nan"), "D": 0.0}
    right = int(response[t]) == answer[t]
    p = 1 - eps if right else eps
    if any(int(response[s]) != answer[s] for s in range(t)):   # an earlier error: 0.1 whatever
        return {"p": p, "gap": 0.0, "D": 0.0}
    stay = (1 - eps) ** (n - 1 - t)
    q_right = stay + FORMAT_REWARD * (1 - stay)
    gap = (q_right - FORMAT_REWARD) * (1 if right else -1)
    return {"p": p, "gap": gap, "D": (1 - p) * abs(gap)}
