"""Verifiable tasks for the GRPO engine, drawn from ``reasoning-gym`` generators (offline, seeded).

A task speaks text (STYLE rule 19): it renders a generator's problem as a prompt of short words
and reads an answer from the words of a response. The model's tokenizer turns the text into ids
(through its chat template when it has one) and the reward reads the decoded response. The
toolkit's own tiny models speak the word-level tokenizer of :mod:`tailtheory.engine.tasks.tokenizer`
(one token a word, so that a ~1M-parameter model can learn a task on a CPU); a user's checkpoint
speaks its own (``Task(..., tokenizer=load_tokenizer(PATH))``). The renderings:

- ``kk`` — Knights and Knaves (2 to 6 people) built from the generator's ``metadata``
  (``statements`` as prefix trees, ``solution`` as booleans), not from its English text::

      prompt   <bos> P0 : ( P0 T = P1 T ) ; P1 : P0 T ; P2 : ( P1 T = P0 F ) ; ?
      response T T F <eos>

  Person ``i`` telling the truth is ``Pi T``, lying ``Pi F``; connectives ``~`` (not),
  ``&`` (and), ``|`` (or), ``>`` (implies), ``=`` (iff), always parenthesised, so the
  rendering is unambiguous. The answer lists every person's truth value in order.
- ``kk_trace`` — the same puzzles (3 people by default), answered after a worked search: try the
  assignments in order (``T T T``, ``T T F``, ..., ``F F F``); under each, evaluate the
  statements person by person (the statement with every atom replaced by its truth value, the
  value after ``is``, ``ok`` if it equals the person's hypothesised value, else ``no``), abandon
  the assignment at its first ``no``; the first assignment with only ``ok`` is the answer::

      prompt   <bos> P0 : ~ P1 F ; P1 : ( P2 T & P2 F ) ; P2 : ( P0 T | P1 F ) ; ?
      response try T T T : P0 ~ F is T ok P1 ( T & F ) is F no try T T F : P0 ~ F is T ok
               P1 ( F & T ) is F no try T F T : P0 ~ T is F no try T F F : P0 ~ T is F no
               try F T T : P0 ~ F is T no try F T F : P0 ~ F is T no try F F T : P0 ~ T
               is F ok P1 ( T & F ) is F ok P2 ( F | T ) is T ok so F F T <eos>

  Target lengths (tokens, ``<eos>`` included, 2,000 problems): three people 29 to 207 (median
  90, 90th percentile 148, 22% over 128); two people 22 to 83; four people 39 to ~440.
- ``kk_knights`` — the ``kk`` puzzles answered by naming the truth-tellers in increasing order
  (``P0 P2 <eos>``; all liars: ``<eos>`` alone), so every answer token chooses among several.
- ``chain_sum`` — sums and differences of small integers, one digit per word
  (``<bos> 1 2 + 7 - 3 0 =`` -> ``- 1 1 <eos>``).

Reward (``Task.reward``), on the words of the response before its first stop id (decoded, split
on whitespace; an id past the tokenizer's own tokens makes it unreadable): 1.0 for the correct
answer, 0.1 for a well-formed wrong one, 0.0 for anything else (no stop, bad words).

Correctness is exact match on the rendered answer (tests check it agrees with the generator's
own ``score_answer`` on the corresponding English answer). Well-formed means: ``kk`` — exactly
``n_people`` words, each ``T`` or ``F``; ``kk_knights`` — distinct people in increasing order;
``chain_sum`` — an optional ``-`` then digits without a
leading zero; ``kk_trace`` — the search above for *some* value expressions (grammar
``v := T | F | ~ v | ( v op v ... )``, one connective per group, depth at most
``depth_constraint``): hypotheses in order, each ``is`` the value of its expression, each verdict
consistent with it, every attempt cut at its first ``no``, stopping at the first all-``ok`` one,
then ``so`` and that hypothesis. Only the expressions, the lookups in the prompt, are free, and
only the final answer is scored. Rendering, search and parsing: :mod:`.knights_knaves`.

Ids (:class:`Task`): the prompt is the tokenizer's chat template applied to the prompt text as
one user message, with the generation prompt (``apply_chat_template``), or, without a template,
BOS (when the tokenizer has one) then the encoded text; the ideal response is the encoded
``target`` (after a space when there is no template: it follows the prompt's last word) then the
primary stop id. A response ends at the first of the stop ids (:mod:`tailtheory.engine.tasks.chat`:
the template's end-of-turn token, EOS, a folder's generation-config EOS ids). Padding is the
tokenizer's pad token, or the primary stop when it has none (pad may be a stop id, as in
Qwen2.5's: ends are never found by comparing with it). For the word-level tokenizer these are
exactly the ids the tasks had before they spoke text.

Seeds: ``problems(n, seed)`` reads generator indices ``seed * SEED_STREAM + [0, n)``: two seeds
never share an index (the generators seed each problem by its index).
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, field
from typing import Any

from tailtheory.core.checks import check_positive_int
from tailtheory.engine.tasks.knights_knaves import (PROSE_WORDS, kk_value_len, parse_kk_trace,
                                              render_kk_prose, render_kk_trace, render_statement)
from tailtheory.engine.tasks.chat import before_stop, stop_ids, template_kwargs
from tailtheory.engine.tasks.tokenizer import (DEFAULT_VOCAB_SIZE, KK_MAX_PEOPLE, WORDS,
                                               as_id_list, build_tokenizer, check_tokenizer,
                                               marks_text_start, tokens_per_word)

SEED_STREAM = 2**20
"""Generator indices per seed: ``problems(n, seed)`` needs ``n <= SEED_STREAM``."""

CORRECT_REWARD, FORMAT_REWARD = 1.0, 0.1
"""Rewards of a correct answer and of a well-formed wrong one (a small format term)."""

KK_TRACE_MAX_PEOPLE = 4
"""Largest ``kk_trace`` puzzle: its search writes up to 2^n attempts (about 680 words for 4)."""


@dataclass(frozen=True)
class Problem:
    """One prompt with its rendered answer; ``meta`` keeps the generator's entry details."""

    prompt_ids: list[int]
    answer: str
    meta: dict = field(default_factory=dict)
    prompt: str = ""
    """The prompt's text (what ``prompt_ids`` encode, before any chat template)."""


@dataclass(frozen=True)
class Reward:
    """``total`` in {1.0, 0.1, 0.0}; see the table in the module docstring."""

    total: float
    correct: bool
    format_ok: bool


class Task:
    """A reasoning-gym generator, a rendering into words, and a verifiable reward.

    ``tokenizer``: the model's (``None``: the toolkit's word-level one of ``vocab_size`` ids);
    ``vocab_size``: the model's embedding rows, at least the tokenizer's length (``None``: that
    length, or :data:`DEFAULT_VOCAB_SIZE` for the word-level tokenizer). A given tokenizer must
    pass :func:`~tailtheory.engine.tasks.tokenizer.check_tokenizer`.
    """

    name, rg_name = "", ""
    words: tuple[str, ...] = WORDS
    """Every word a response may use: the word-level tokenizer holds them, a given tokenizer must
    write them back, and :attr:`tokens_per_word` is measured over them."""

    def __init__(self, seed: int = 0, vocab_size: int | None = None, *, tokenizer=None,
                 **rg_kwargs: Any):
        self.seed = check_positive_int(seed, "seed", minimum=0)
        self.rg_kwargs = rg_kwargs
        own = tokenizer is None
        if own:
            tokenizer = build_tokenizer(DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size,
                                        self.words)
        self.tokenizer = tokenizer
        self.vocab_size = check_positive_int(len(tokenizer) if vocab_size is None else vocab_size,
                                             "vocab_size")
        if not own:
            check_tokenizer(tokenizer, self.vocab_size, words=self.words)
        self.n_tokens = len(tokenizer)  # ids it knows; [n_tokens, vocab_size): padding rows
        self.stop_ids = stop_ids(tokenizer)     # a response ends at the first; [0]: primary
        self.eos_id = self.stop_ids[0]          # what a target ends with
        self.pad_id = self.eos_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
        self.bos_id = tokenizer.bos_token_id
        self.chat = bool(getattr(tokenizer, "chat_template", None))  # prompts via the template
        self.chat_kwargs = template_kwargs(tokenizer)   # Qwen3's: thinking off (.chat)
        # a response's first word follows the prompt's last word (a space), or a chat template's
        # generation prompt, which ends in a newline, or a tokenizer that writes the space (none)
        self.response_prefix = "" if self.chat or marks_text_start(tokenizer, self.words) else " "
        self.tokens_per_word = tokens_per_word(tokenizer, self.words)

    # --- rendering (subclasses) ---
    max_response_words: int = 0
    """Most words of a well-formed response, EOS not counted."""
    chance_accuracy: float = 0.0
    """Accuracy of a model that knows only the answer format and guesses uniformly."""

    @property
    def max_response_len(self) -> int:
        """Longest well-formed response in tokens, EOS included (the rollout's
        ``max_new_tokens``): :attr:`max_response_words` times the most tokens a task word takes
        (:attr:`tokens_per_word`, 1 for the word-level tokenizer), plus EOS."""
        return self.max_response_words * self.tokens_per_word + 1

    def render(self, entry: dict) -> tuple[str, str, dict]:
        """``(prompt words, answer words, meta)`` of one generator entry."""
        raise NotImplementedError

    def well_formed(self, words: list[str]) -> bool:
        """Whether ``words`` (the response before EOS) is a syntactically valid answer."""
        raise NotImplementedError

    def final_answer(self, words: list[str]) -> str | None:
        """The answer words a well-formed response ends on (the whole response for the short
        tasks), or None when ``words`` is malformed."""
        return " ".join(words) if self.well_formed(words) else None

    def target(self, problem: Problem) -> str:
        """Words of the ideal response before EOS: the answer itself for the short tasks."""
        return problem.answer

    # --- shared ---
    def problems(self, n: int, seed: int | None = None) -> list[Problem]:
        """``n`` problems from generator indices ``seed * SEED_STREAM + [0, n)`` (reproducible)."""
        import reasoning_gym

        n = check_positive_int(n, "n")
        seed = self.seed if seed is None else check_positive_int(seed, "seed", minimum=0)
        if n > SEED_STREAM:
            raise ValueError(f"n must be <= SEED_STREAM ({SEED_STREAM}), got {n}")
        ds = reasoning_gym.create_dataset(self.rg_name, size=n, seed=seed * SEED_STREAM,
                                          **self.rg_kwargs)
        out = []
        for entry in ds:
            prompt, answer, meta = self.render(entry)
            meta = {"rg_answer": entry["answer"], "rg_index": seed * SEED_STREAM
                    + entry["metadata"]["source_index"], **meta}
            out.append(Problem(self.prompt_ids(prompt), answer, meta, prompt))
        return out

    def prompt_ids(self, text: str) -> list[int]:
        """The ids of a prompt's text: the chat template's (one user message, generation prompt
        added) when the tokenizer has one, else BOS (when it has one) and the encoded text."""
        if self.chat:
            out = self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                     add_generation_prompt=True, tokenize=True,
                                                     return_dict=False, **self.chat_kwargs)
            return [int(i) for i in (out["input_ids"] if hasattr(out, "keys") else out)]
        return ([] if self.bos_id is None else [self.bos_id]) + self.encode(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids) -> str:
        """Text of ``ids`` (special tokens kept; the word-level tokenizer joins words by single
        spaces)."""
        return self.tokenizer.decode(as_id_list(ids, self.vocab_size, "ids"),
                                     skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def target_ids(self, problem: Problem) -> list[int]:
        """The ideal response: ``target`` ids then EOS (the supervised warm-start target)."""
        return self.encode(self.response_prefix + self.target(problem)) + [self.eos_id]

    def add_stop_ids(self, ids) -> None:
        """Also end responses at ``ids`` (e.g. a folder's generation-config EOS ids)."""
        self.stop_ids = tuple(dict.fromkeys([*self.stop_ids, *as_id_list(
            list(ids), self.vocab_size, "stop ids")]))

    def response_words(self, response_ids) -> list[str] | None:
        """The words of a response: its ids up to the first stop id, decoded and split on
        whitespace; None without one or with an id the tokenizer does not know (a padding row of the
        model's embedding: it decodes to nothing, so it must not vanish from the answer)."""
        ids = before_stop(as_id_list(response_ids, self.vocab_size, "response_ids"),
                          self.stop_ids)
        if ids is None or any(i >= self.n_tokens for i in ids):
            return None
        return self.tokenizer.decode(ids, skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False).split()

    def reward(self, problem: Problem, response_ids) -> Reward:
        """Reward of ``response_ids`` (list or 1-D tensor; anything after the first EOS ignored),
        read from its decoded words (:meth:`response_words`)."""
        words = self.response_words(response_ids)
        answer = None if words is None else self.final_answer(words)
        if answer is None:
            return Reward(0.0, False, False)
        correct = answer == problem.answer
        return Reward(CORRECT_REWARD if correct else FORMAT_REWARD, correct, True)


class KnightsKnaves(Task):
    """``kk``: who tells the truth? (reasoning-gym ``knights_knaves``)."""

    name, rg_name = "kk", "knights_knaves"

    def __init__(self, seed: int = 0, vocab_size: int | None = None, n_people: int = 3,
                 depth_constraint: int = 2, width_constraint: int = 2, *, tokenizer=None):
        if check_positive_int(n_people, "n_people", minimum=2) > KK_MAX_PEOPLE:
            raise ValueError(f"n_people must be <= {KK_MAX_PEOPLE}, got {n_people}")
        check_positive_int(depth_constraint, "depth_constraint")
        check_positive_int(width_constraint, "width_constraint")
        super().__init__(seed, vocab_size, tokenizer=tokenizer, n_people=n_people,
                         depth_constraint=depth_constraint, width_constraint=width_constraint)
        self.n_people = self.max_response_words = n_people
        self.chance_accuracy = 2.0 ** -n_people

    def render(self, entry: dict) -> tuple[str, str, dict]:
        md = entry["metadata"]
        said = [f"P{i} : {render_statement(s)} ;" for i, s in enumerate(md["statements"])]
        answer = " ".join("T" if v else "F" for v in md["solution"])
        meta = {"statements": md["statements"], "solution": tuple(bool(v) for v in md["solution"]),
                "names": md["names"], "terms": md["knight_knave_terms"]}
        return " ".join(said) + " ?", answer, meta

    def well_formed(self, words: list[str]) -> bool:
        return len(words) == self.n_people and all(w in ("T", "F") for w in words)


class KnightsKnavesTrace(KnightsKnaves):
    """``kk_trace``: Knights and Knaves answered after a worked search (reasoning-gym
    ``knights_knaves``); same prompts as ``kk``, responses of tens to hundreds of words."""

    name = "kk_trace"

    def __init__(self, seed: int = 0, vocab_size: int | None = None, n_people: int = 3,
                 depth_constraint: int = 2, width_constraint: int = 2, *, tokenizer=None):
        if check_positive_int(n_people, "n_people", minimum=2) > KK_TRACE_MAX_PEOPLE:
            raise ValueError(f"n_people must be <= {KK_TRACE_MAX_PEOPLE} for kk_trace (its "
                             f"search tries up to 2**n_people assignments), got {n_people}")
        super().__init__(seed, vocab_size, n_people, depth_constraint, width_constraint,
                         tokenizer=tokenizer)
        self.depth = depth_constraint
        # every assignment fails at the last check at worst: 2^n attempts of
        # "try" n ":" and n checks "Pi <value> is v ok", then "so" n (EOS not counted)
        check = kk_value_len(depth_constraint, width_constraint) + 4
        self.max_response_words = 2**n_people * (n_people + 2 + n_people * check) + n_people + 1

    def render(self, entry: dict) -> tuple[str, str, dict]:
        prompt, answer, meta = super().render(entry)
        trace, h = render_kk_trace(meta["statements"])
        if h != meta["solution"]:
            raise ValueError(f"the search found {h}, the generator says {meta['solution']}")
        return prompt, answer, {**meta, "trace": trace}

    def target(self, problem: Problem) -> str:
        return problem.meta["trace"]

    def final_answer(self, words: list[str]) -> str | None:
        return parse_kk_trace(words, self.n_people, self.depth)

    def well_formed(self, words: list[str]) -> bool:
        return self.final_answer(words) is not None


class KnightsKnavesProse(KnightsKnavesTrace):
    """``kk_prose``: the ``kk_trace`` search written with a choice of words and order
    (:func:`~tailtheory.engine.tasks.knights_knaves.render_kk_prose`): each trace word may be any of its
    synonyms, drawn with Zipf weights, and each attempt checks its people in a random order. The
    ideal response of a problem is drawn once, from its generator index, so a training pool holds
    every form; any form of the search is well-formed, and only the final answer is scored."""

    name = "kk_prose"
    words = WORDS + PROSE_WORDS

    def target(self, problem: Problem) -> str:
        rng = random.Random(problem.meta["rg_index"])
        return render_kk_prose(problem.meta["statements"], rng)[0]

    def final_answer(self, words: list[str]) -> str | None:
        return parse_kk_trace(words, self.n_people, self.depth, prose=True)


class KnightsList(KnightsKnaves):
    """``kk_knights``: the ``kk`` puzzles answered by naming the truth-tellers in increasing
    order (``P0 P2``; none: the empty answer). Every answer token, EOS included, chooses among
    the people still to come and the end: a choice that decides the answer."""

    name = "kk_knights"

    def render(self, entry: dict) -> tuple[str, str, dict]:
        prompt, _, meta = super().render(entry)
        return prompt, " ".join(f"P{i}" for i, v in enumerate(meta["solution"]) if v), meta

    def final_answer(self, words: list[str]) -> str | None:
        return " ".join(words) if self.well_formed(words) else None

    def well_formed(self, words: list[str]) -> bool:
        idx = [int(w[1:]) if w[:1] == "P" and w[1:].isdigit() else -1 for w in words]
        return all(0 <= i < self.n_people for i in idx) and idx == sorted(set(idx))


class ChainSum(Task):
    """``chain_sum``: ``a ± b ± c`` with small non-negative terms (reasoning-gym ``chain_sum``)."""

    name, rg_name = "chain_sum", "chain_sum"

    def __init__(self, seed: int = 0, vocab_size: int | None = None, min_terms: int = 2,
                 max_terms: int = 3, min_digits: int = 1, max_digits: int = 2, *,
                 tokenizer=None):
        for v, nm in ((min_terms, "min_terms"), (max_terms, "max_terms"),
                      (min_digits, "min_digits"), (max_digits, "max_digits")):
            check_positive_int(v, nm)
        if max_terms < min_terms or max_digits < min_digits:
            raise ValueError(f"need min_terms <= max_terms and min_digits <= max_digits; got terms "
                             f"[{min_terms}, {max_terms}], digits [{min_digits}, {max_digits}]")
        super().__init__(seed, vocab_size, tokenizer=tokenizer, min_terms=min_terms,
                         max_terms=max_terms, min_digits=min_digits, max_digits=max_digits)
        # |result| <= max_terms * (10**max_digits - 1): its digits and a sign
        self.max_response_words = len(str(max_terms * (10**max_digits - 1))) + 1

    def render(self, entry: dict) -> tuple[str, str, dict]:
        expr = entry["metadata"]["expression"]
        prompt = " ".join(" ".join(tok) if tok.isdigit() else tok for tok in expr.split()) + " ="
        result = int(entry["answer"])
        answer = ("- " if result < 0 else "") + " ".join(str(abs(result)))
        return prompt, answer, {"expression": expr, "result": result}

    def well_formed(self, words: list[str]) -> bool:
        digits = words[1:] if words[:1] == ["-"] else words
        return (bool(digits) and all(len(w) == 1 and w.isdigit() for w in digits)
                and not (digits[0] == "0" and (len(digits) > 1 or words[:1] == ["-"])))


TASKS = {t.name: t for t in (KnightsKnaves, KnightsKnavesTrace, KnightsKnavesProse, KnightsList,
                             ChainSum)}
"""Task registry: name -> class."""


def get_task(name: str, seed: int = 0, stop_ids=(), **kwargs: Any) -> Task:
    """The task called ``name`` (one of ``TASKS``); ``kwargs`` go to its constructor;
    ``stop_ids``: more ids that end a response (:meth:`Task.add_stop_ids`)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {sorted(TASKS)}")
    accepted = set(inspect.signature(TASKS[name]).parameters) - {"seed"}
    if set(kwargs) - accepted:
        raise ValueError(f"task {name!r} takes no argument(s) {sorted(set(kwargs) - accepted)}; "
                         f"it accepts {sorted(accepted)}")
    task = TASKS[name](seed=seed, **kwargs)
    task.add_stop_ids(stop_ids)
    return task
