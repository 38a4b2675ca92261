"""A task's turn in a model's own conventions: how the generation prompt is written, and the
stop ids, a set, that end a response.

**The generation prompt.** A chat template with a thinking switch (Qwen3's ``enable_thinking``)
is applied with thinking off (:data:`THINKING_OFF`, :func:`template_kwargs`): the tasks score a
direct answer, and Qwen3's template then writes an empty ``<think></think>`` block into the prompt,
so the response starts with the answer. What was passed is recorded with a warm start.

**Where a response ends.**
An instruct checkpoint ends a turn with a token of its chat template (Qwen's ``<|im_end|>``,
Llama 3's ``<|eot_id|>``), which is often not the tokenizer's EOS (Qwen2.5's base EOS is
``<|endoftext|>``, Llama 3's ``<|end_of_text|>``), and its ``generation_config.json`` may list
several EOS ids (Llama 3.x instruct lists three). Sampling that stopped only at the tokenizer's
EOS would read the end-of-turn token as a word and run on to the length cap.

The rule (:func:`stop_ids`): a response ends at the first of

- the token the chat template writes right after an assistant turn's content
  (:func:`end_of_turn_id`; none without a template),
- the tokenizer's EOS,
- every id of ``eos_token_id`` in the model folder's ``generation_config.json``
  (:func:`generation_eos_ids`; read as JSON, so the file cannot run code).

The first of these that exists is the *primary* stop: the id a supervised target ends with.
A response's end is found from the rollout's mask or from these ids, never by comparing with the
pad id (Qwen2.5's pad is one of its EOS ids).
"""

from __future__ import annotations

import json
from pathlib import Path

THINKING_OFF = {"enable_thinking": False}
"""The chat-template arguments of a template that has Qwen3's thinking switch."""

GENERATION_CONFIG = "generation_config.json"
"""The file ``save_pretrained`` writes a model's generation defaults to."""

_MARK = "\u2063tailtheory\u2063"
"""Assistant content that no template rewrites: what follows it is the end of the turn."""


def template_kwargs(tokenizer) -> dict:
    """The extra ``apply_chat_template`` arguments the tasks pass: :data:`THINKING_OFF` when the
    tokenizer's chat template reads ``enable_thinking``, else none."""
    template = getattr(tokenizer, "chat_template", None)
    text = template if isinstance(template, str) else str(template or "")
    return dict(THINKING_OFF) if "enable_thinking" in text else {}


def end_of_turn_id(tokenizer) -> int | None:
    """The id of the special token the tokenizer's chat template writes right after an assistant
    turn's content, or ``None`` (no template, or plain text follows the content)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _MARK}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **template_kwargs(tokenizer))
    except Exception:  # a template that cannot write an assistant turn: no end-of-turn token
        return None
    if not isinstance(text, str) or _MARK not in text:
        return None
    after = text[text.rindex(_MARK) + len(_MARK):]
    ids = tokenizer.encode(after, add_special_tokens=False) if after else []
    special = set(getattr(tokenizer, "all_special_ids", ()))
    special |= {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()
                if getattr(t, "special", False)}
    return int(ids[0]) if ids and ids[0] in special else None


def generation_eos_ids(folder: str | Path | None) -> list[int]:
    """The ``eos_token_id`` ids (an int or a list) of ``folder``'s ``generation_config.json``;
    ``[]`` when there is no folder, no file or no such field. A file that is not JSON, or ids
    that are not non-negative ints, raise ``ValueError`` naming the file."""
    if folder is None or not (Path(folder) / GENERATION_CONFIG).exists():
        return []
    path = Path(folder) / GENERATION_CONFIG
    try:
        eos = json.loads(path.read_text()).get("eos_token_id")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a JSON object ({exc}); fix or remove it") from None
    ids = [] if eos is None else eos if isinstance(eos, list) else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError(f"{path}: eos_token_id must be a token id or a list of them, got {eos!r}")
    return list(ids)


def stop_ids(tokenizer, extra=()) -> tuple[int, ...]:
    """The ids that end a response, primary first (module docstring): the chat template's
    end-of-turn token, the tokenizer's EOS, then ``extra`` (a folder's
    :func:`generation_eos_ids`), each once."""
    found = [end_of_turn_id(tokenizer), getattr(tokenizer, "eos_token_id", None), *extra]
    return tuple(dict.fromkeys(int(i) for i in found if i is not None))


def before_stop(ids: list[int], stops) -> list[int] | None:
    """``ids`` before the first of ``stops``, or ``None`` when none occurs."""
    stops = set(stops)
    for i, t in enumerate(ids):
        if t in stops:
            return ids[:i]
    return None
