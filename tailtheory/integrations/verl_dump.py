"""Per-token dumps of a verl run, for ``tailtheory diagnose``: :func:`dump_batch`.

Call it on the driver once per training step, after verl has computed the advantages (the batch
then holds every field below), e.g. in your own ``RayPPOTrainer`` / ``PPOTrainer`` loop::

    from tailtheory.integrations.verl_dump import dump_batch
    dump_batch(batch, step=self.global_steps, dump_dir="dump")   # dump/step_000001.jsonl
    # then: tailtheory diagnose dump/ --out diag/

``batch`` is a ``verl.protocol.DataProto`` (its ``.batch`` TensorDict and ``.non_tensor_batch``),
or any mapping of the same names (a TensorDict read back from verl's transfer queue too: jagged
per-response tensors are padded). Fields, as verl 0.9.1 names them (``verl/trainer/ppo/
ray_trainer.py`` and ``verl/trainer/ppo/v1/trainer_base.py``, the steps ``old_log_prob``, ``adv``):

- ``responses`` (B, T) -> ``token_id``; ``response_mask`` (B, T) the sampled tokens (else the
  response part of ``attention_mask``, the last T columns);
- ``old_log_probs`` -> ``logp_train`` (the actor's recomputation before the update);
- ``rollout_log_probs`` -> ``logp_rollout``: present only with
  ``actor_rollout_ref.rollout.calculate_log_probs=True`` (``docs/examples/config.rst``);
- ``advantages`` (B, T) -> ``advantage``; ``token_level_rewards`` (or ``token_level_scores``,
  ``rm_scores``) summed over tokens -> ``reward``; ``uid`` (``non_tensor_batch``, the prompt
  group) is not needed: ``sample_id`` is ``"{step}-{row}"`` unless ``sample_ids`` are given.

Loud failures (``ValueError``, one line naming the fix): no ``rollout_log_probs``; and
``old_log_probs`` equal to ``rollout_log_probs`` everywhere, which is what verl's bypass mode
(``algorithm.rollout_correction.bypass_mode``) writes: the mismatch would read 0.

Why a function and not a registered plugin: verl 0.9.1's registries hand their functions
selected tensors only (a policy loss gets ``old_log_prob`` and ``rollout_is_weights``, an
advantage estimator the rewards and mask; ``verl/trainer/ppo/core_algos.py``), never
``rollout_log_probs`` beside ``old_log_probs``; the v1 trainer's ``on_*`` hooks receive no batch;
and a trainer registered under a new ``trainer.v1.trainer_mode`` name changes the sync trainer's
replay buffer (``trainer_base.py`` tests ``trainer_mode != "sync"``). verl's documentation invites
new trainer classes (``docs/api/trainer.rst``), which is where this call goes.
Format: :mod:`tailtheory.integrations.dump`. Shapes: ``B`` responses, ``T`` response tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tailtheory.integrations.dump import JsonlDump, sequence_records

REWARD_KEYS = ("token_level_rewards", "token_level_scores", "rm_scores")
"""Per-token reward fields, in order of preference (summed over the response for ``reward``)."""


def _tensors(batch) -> dict:
    """The batch's tensors by name (a DataProto's ``.batch``, or the mapping itself), padded."""
    data = getattr(batch, "batch", batch)
    out = {}
    for k in data.keys():
        v = data[k]
        if isinstance(v, torch.Tensor):
            out[k] = v.to_padded_tensor(0.0) if v.is_nested else v
    return out


def batch_records(batch, step: int, sample_ids: list | None = None) -> list[dict]:
    """Generic-format records (one per response) of a verl batch; see the module docstring.

    Raises ``ValueError`` naming the missing field or the configuration that causes it.
    """
    t = _tensors(batch)
    for k in ("responses", "old_log_probs"):
        if k not in t:
            raise ValueError(f"the batch has no {k!r}: call dump_batch after verl's old_log_prob "
                             f"and adv steps")
    if "rollout_log_probs" not in t:
        raise ValueError("the batch has no 'rollout_log_probs': set "
                         "actor_rollout_ref.rollout.calculate_log_probs=True")
    ids, train, roll = t["responses"], t["old_log_probs"], t["rollout_log_probs"]
    T = ids.shape[1]
    if "response_mask" in t:
        mask = t["response_mask"]
    elif "attention_mask" in t:
        mask = t["attention_mask"][:, -T:]
    else:
        raise ValueError("the batch has neither 'response_mask' nor 'attention_mask'")
    keep = mask.bool()
    if keep.any() and torch.equal(train[keep], roll[keep]):
        raise ValueError("old_log_probs equal rollout_log_probs: verl's bypass mode reuses the "
                         "rollout's log-probs; set algorithm.rollout_correction.bypass_mode=False")
    reward_key = next((k for k in REWARD_KEYS if k in t), None)
    rewards = None if reward_key is None else (t[reward_key] * mask).sum(-1)
    ids_ = sample_ids if sample_ids is not None else [f"{step}-{i}" for i in range(len(ids))]
    return sequence_records(ids, train, roll, mask, step=step, sample_ids=ids_,
                            advantages=t.get("advantages"), rewards=rewards)


def dump_batch(batch, step: int, dump_dir: str | Path, sample_ids: list | None = None,
               append: bool = False) -> Path:
    """Write ``batch`` (one training step) to ``dump_dir/step_{step:06d}.jsonl`` and return
    its path. The folder is created; an existing file is an error unless ``append``."""
    path = Path(dump_dir) / f"step_{int(step):06d}.jsonl"
    records = batch_records(batch, step, sample_ids)
    JsonlDump(path, append=append).write(records)
    return path


__all__ = ["dump_batch", "batch_records", "REWARD_KEYS"]
