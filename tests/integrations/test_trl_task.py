"""A task as TRL data on a user's checkpoint (``tailtheory/integrations/trl_task.py``): the
prompts through its chat template (Qwen3's thinking off), the engine's reward on TRL's completion
ids, TRL stopping at the task's stop ids, and ``TailGRPOTrainer`` training on it.

Checkpoint: ``tests/checkpoints.family_checkpoint`` (a random tiny Qwen3, its byte-level BPE and a
ChatML template with the thinking switch), on the CPU, offline.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")

from tailtheory.core.models import load_lm, load_tokenizer  # noqa: E402
from tailtheory.engine.tasks.chat import THINKING_OFF, generation_eos_ids  # noqa: E402
from tailtheory.engine.tasks.task import get_task  # noqa: E402
from tailtheory.integrations.trl import TailGRPOConfig, TailGRPOTrainer  # noqa: E402
from tailtheory.integrations.trl_task import (task_dataset, task_reward,  # noqa: E402
                                              task_trl_kwargs, use_task_stops)
from tests.checkpoints import family_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    path = family_checkpoint(tmp_path_factory.mktemp("qwen3") / "model", "qwen3")
    tok = load_tokenizer(path)
    model = load_lm(path, device="cpu").float()
    task = get_task("kk", n_people=2, tokenizer=tok, vocab_size=model.config.vocab_size,
                    stop_ids=generation_eos_ids(path))
    return model, tok, task


def test_dataset_and_reward(qwen3):
    _, tok, task = qwen3
    data = task_dataset(task, 4)
    problems = task.problems(4)
    assert data["answer"] == [p.answer for p in problems]
    assert data["prompt"][0] == [{"role": "user", "content": problems[0].prompt}]
    kw = task_trl_kwargs(task)
    assert kw["chat_template_kwargs"] == THINKING_OFF
    assert kw["max_completion_length"] == task.max_response_len
    text = tok.apply_chat_template(data["prompt"][0], add_generation_prompt=True, tokenize=False,
                                   **kw["chat_template_kwargs"])
    assert tok(text, add_special_tokens=False)["input_ids"] == problems[0].prompt_ids
    reward = task_reward(task)
    right = task.target_ids(problems[0])                  # the answer, then the stop id
    wrong = task.encode("F " * 2)[:-1] + [task.eos_id]
    assert reward(completions=["", "", ""], completion_ids=[right, right[:-1], wrong],
                  answer=[problems[0].answer] * 3) == [1.0, 0.0, pytest.approx(
                      task.reward(problems[0], wrong).total)]


def test_tail_trainer_trains_a_task_on_a_user_checkpoint(tmp_path, qwen3):
    model, tok, task = qwen3
    use_task_stops(model, task)
    assert model.generation_config.eos_token_id == list(task.stop_ids)
    before = [p.detach().clone() for p in model.parameters()]
    kw = task_trl_kwargs(task)
    args = TailGRPOConfig(output_dir=str(tmp_path), tail_method="tis", per_device_train_batch_size=4,
                          num_generations=2, max_steps=2, learning_rate=1e-2, use_cpu=True,
                          report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
                          seed=0, bf16=False, dataloader_num_workers=0, **kw)
    def parity(completion_ids, **_):       # random weights never answer: a reward that varies
        return [float(ids[0] % 2) for ids in completion_ids]

    trainer = TailGRPOTrainer(model=model, reward_funcs=[task_reward(task), parity], args=args,
                              train_dataset=task_dataset(task, 8), processing_class=tok)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    assert all(0.0 <= h["rewards/kk_reward/mean"] <= 1.0 for h in logs)
    assert any((p.detach() != q).any() for p, q in zip(trainer.model.parameters(), before))
    assert torch.isfinite(torch.tensor([h["loss"] for h in logs])).all()
