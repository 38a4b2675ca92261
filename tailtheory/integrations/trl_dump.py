"""Per-token dumps of a TRL 1.16 ``GRPOTrainer`` run, for ``tailtheory diagnose``.

Use (with vLLM, or a ``rollout_func`` that returns log-probs)::

    from tailtheory.integrations.trl_dump import DumpingGRPOTrainer
    trainer = DumpingGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(..., use_vllm=True),
                                 train_dataset=..., dump_dir="dump")
    trainer.train()            # dump/rank{r}.jsonl, one line per completion
    # then: tailtheory diagnose dump/ --out diag/

or mix :class:`TokenDumpMixin` into your own ``GRPOTrainer`` subclass (first in the bases; also
with :class:`tailtheory.integrations.trl.TailGRPOTrainer`).

**The hook.** :class:`TokenDumpMixin` overrides ``compute_loss(model, inputs, ...)``, a public
method that transformers documents as the place to subclass ("Subclass and override for custom
behavior": ``transformers/trainer.py`` ``Trainer.compute_loss``; the list of overridable methods
in ``docs/source/en/trainer_customize.md``), and which TRL's ``GRPOTrainer`` keeps public
(``trl/trainer/grpo_trainer.py``, ``GRPOTrainer.compute_loss``) and calls with the prepared
micro-batch. It reads that batch and calls ``super().compute_loss`` unchanged, so training is
untouched. A ``TrainerCallback`` cannot do this: its events receive the model, optimiser,
dataloaders and logged scalars, never the generated batch (``transformers/trainer_callback.py``,
``CallbackHandler.call_event``).

**What it reads** (keys of the micro-batch, ``trl/trainer/grpo_trainer.py``): ``completion_ids``,
``completion_mask`` (times ``tool_mask`` when present: tool output was not sampled),
``sampling_per_token_logps`` -> ``logp_rollout``, ``old_per_token_logps`` -> ``logp_train``,
``advantages`` (``(B,)``, or ``(B, T)`` from ``TailGRPOTrainer``) -> ``advantage``. TRL computes
``old_per_token_logps`` (the trainer's forward at the weights that sampled) with vLLM's
importance-sampling correction (``vllm_importance_sampling_correction``, on by default) or when
generation and optimiser steps are misaligned; otherwise the weights have not moved since the
batch was sampled, and the hook runs one no-grad forward of the model on the micro-batch
(logits divided by ``args.temperature``, as TRL scores tokens). The per-completion reward is not
in the micro-batch, so no ``reward`` is written (diagnose then takes ``R_max = 1``).

**Without vLLM.** TRL 1.16 has a sampler log-prob (``sampling_per_token_logps``) only with
``use_vllm=True`` or a ``rollout_func`` returning ``logprobs`` (its documented, experimental
argument); plain ``transformers`` generation keeps none, so there is no mismatch to measure. The
constructor then raises ``ValueError`` at once; a ``rollout_func`` whose ``logprobs`` are ``None``
raises at the first batch. Nothing is ever skipped silently.

**Once per sample.** With ``num_iterations > 1`` TRL reuses each generation batch; only its first
pass is written (the micro-batches of a generation come in ``steps_per_generation`` consecutive
calls, ``trl/trainer/grpo_trainer.py`` ``_prepare_inputs`` documents the order). Evaluation
batches are not written. Each process writes its own ``rank{process_index}.jsonl``.
``sample_id`` is ``"g{generation}-m{micro-batch}-{row}"``, ``step`` is ``state.global_step``
when the batch is trained on. Format: :mod:`tailtheory.integrations.dump`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from trl import GRPOTrainer

from tailtheory.integrations.dump import JsonlDump, sequence_records

NO_ROLLOUT_LOGPROBS = (
    "TRL keeps the sampler's per-token log-probs only with use_vllm=True or a rollout_func that "
    "returns logprobs; set one of them to dump logp_rollout (plain generate keeps none)")
"""The error raised when the run has no sampler log-probs to dump."""


class TokenDumpMixin:
    """Writes every trained completion's per-token ``logp_train`` / ``logp_rollout`` to
    ``dump_dir/rank{r}.jsonl`` (the generic dump format), through ``compute_loss``.

    Mix into a ``GRPOTrainer`` (sub)class, before it in the bases. Extra constructor arguments:
    ``dump_dir`` (required; created) and ``dump_append`` (default False: an existing
    ``rank{r}.jsonl`` is an error; True adds to it, e.g. when resuming). See the module
    docstring for the hook, what is read, and the error raised without vLLM.
    """

    def __init__(self, *args, dump_dir: str | Path | None = None, dump_append: bool = False,
                 **kwargs):
        if dump_dir is None:
            raise ValueError(f"{type(self).__name__} needs dump_dir=, the folder for the dump")
        super().__init__(*args, **kwargs)
        if not self.args.use_vllm and getattr(self, "rollout_func", None) is None:
            raise ValueError(NO_ROLLOUT_LOGPROBS)
        self.dump_path = Path(dump_dir) / f"rank{self.args.process_index}.jsonl"
        self._dump = JsonlDump(self.dump_path, append=dump_append)
        self._dump_calls = 0
        self.dump_rows = 0
        """Completions written so far by this process."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Write the micro-batch's completions (first pass of each generation, training only),
        then TRL's own ``compute_loss``."""
        if model.training:
            call = self._dump_calls
            self._dump_calls += 1
            spg, iters = self.args.steps_per_generation, self.args.num_iterations
            if call % (spg * iters) < spg:
                self.dump_rows += self._dump.write(
                    self.dump_records(model, inputs, generation=call // (spg * iters),
                                      micro=call % spg))
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)

    def dump_records(self, model, inputs: dict, generation: int, micro: int) -> list[dict]:
        """The generic-format records of one micro-batch (``inputs`` as ``compute_loss``
        receives it). Raises ``ValueError`` when it holds no sampler log-probs."""
        roll = inputs.get("sampling_per_token_logps")
        if roll is None:
            raise ValueError(NO_ROLLOUT_LOGPROBS)
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        train = inputs.get("old_per_token_logps")
        if train is None:
            train = trainer_logps(model, inputs, self.args.temperature)
        ids = inputs["completion_ids"]
        return sequence_records(ids, train, roll, mask, step=self.state.global_step,
                                sample_ids=[f"g{generation}-m{micro}-{i}" for i in range(len(ids))],
                                advantages=inputs.get("advantages"))


class DumpingGRPOTrainer(TokenDumpMixin, GRPOTrainer):
    """TRL's ``GRPOTrainer`` writing a per-token dump to ``dump_dir`` (:class:`TokenDumpMixin`)."""


def trainer_logps(model, inputs: dict, temperature: float = 1.0) -> torch.Tensor:
    """``(B, C)`` log-probs of the completion tokens under ``model`` (no gradient): one forward
    over prompt + completion, logits divided by ``temperature``, as TRL scores tokens."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    c = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, -c - 1:-1].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        return logp.gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)


__all__ = ["TokenDumpMixin", "DumpingGRPOTrainer", "trainer_logps", "NO_ROLLOUT_LOGPROBS"]
