"""A tailtheory task as TRL data: prompts, answers and the task's own reward, in a user's
checkpoint's tokenizer, for ``TailGRPOTrainer`` (``tailtheory.integrations.trl``) or TRL's own
``GRPOTrainer``. Use::

    from tailtheory.core.models import load_lm, load_tokenizer
    from tailtheory.engine.tasks.chat import generation_eos_ids
    from tailtheory.engine.tasks.task import get_task
    from tailtheory.integrations.trl_task import task_dataset, task_reward, task_trl_kwargs, use_task_stops

    tok, model = load_tokenizer(PATH), load_lm(PATH)
    task = get_task("kk", tokenizer=tok, vocab_size=model.config.vocab_size,
                    stop_ids=generation_eos_ids(PATH))
    use_task_stops(model, task)
    args = TailGRPOConfig(output_dir="out", tail_method="tis", **task_trl_kwargs(task), ...)
    trainer = TailGRPOTrainer(model=model, reward_funcs=task_reward(task), args=args,
                              train_dataset=task_dataset(task, 512), processing_class=tok)

- **Prompts** (:func:`task_dataset`): one user message per problem (TRL applies the chat template,
  with :func:`task_trl_kwargs`' ``chat_template_kwargs``: Qwen3's thinking off, as the engine's
  prompts) when the tokenizer has a template; the prompt text otherwise. Column ``answer`` holds
  the rendered answer, which TRL passes to the reward.
- **Reward** (:func:`task_reward`): the engine's :meth:`~tailtheory.engine.tasks.task.Task.reward`
  on TRL's ``completion_ids`` (up to and including the first EOS TRL found): 1.0 correct, 0.1
  well formed, 0.0 otherwise, the text read before the first of the task's stop ids.
- **Stops** (:func:`use_task_stops`): TRL ends a completion at the model's generation-config EOS
  ids and the tokenizer's EOS; this sets the former to the task's stop ids (the chat template's
  end-of-turn token included), so TRL's completions end where the engine's do.
"""

from __future__ import annotations

from datasets import Dataset

from tailtheory.core.checks import check_positive_int
from tailtheory.engine.tasks.task import Problem, Task


def task_dataset(task: Task, n: int, seed: int | None = None) -> Dataset:
    """``n`` problems of ``task`` (generator seed ``seed``, default the task's) as a TRL dataset
    with columns ``prompt`` (conversational with a chat template, text without) and ``answer``."""
    problems = task.problems(check_positive_int(n, "n"), seed=seed)
    prompts = [[{"role": "user", "content": p.prompt}] if task.chat else p.prompt
               for p in problems]
    return Dataset.from_dict({"prompt": prompts, "answer": [p.answer for p in problems]})


def task_reward(task: Task):
    """A TRL reward function: ``task.reward`` of each completion's ids against its ``answer``."""
    def reward(completions, completion_ids, answer, **_) -> list[float]:
        return [task.reward(Problem([], a), ids).total for ids, a in zip(completion_ids, answer)]

    reward.__name__ = f"{task.name}_reward"
    return reward


def task_trl_kwargs(task: Task) -> dict:
    """``GRPOConfig`` fields the task's prompts need: ``chat_template_kwargs`` (thinking off for a
    template with the switch), and ``max_completion_length`` = the task's response cap."""
    return {"chat_template_kwargs": dict(task.chat_kwargs),
            "max_completion_length": task.max_response_len}


def use_task_stops(model, task: Task) -> None:
    """Make TRL end completions at the task's stop ids: the model's generation config's
    ``eos_token_id`` becomes that list (primary first)."""
    model.generation_config.eos_token_id = list(task.stop_ids)
