"""Named training recipes: every field of a run that a testbed fixes, under one name.

``tailtheory train --recipe learn --seed S --out DIR`` fills the task, model, warm start, batch,
learning rate, steps and evaluation of the project's learning testbed; any explicit flag then
overrides one field, except the fields a recipe cannot give up (its task, whose warm start and
held-out problems the recipe is), which are an error to change. ``--recipe list`` prints them.

``learn``: GRPO on ``kk_trace`` with two people per puzzle (Knights and Knaves answered after a
worked search; sampled responses of 22 to 83 tokens, median above 40; reward on the final
answer only), from the task's supervised warm start (cached; sampled accuracy in
``[0.35, 0.70]``), 32 prompts x 8 responses a step on the ``exact`` rollout path, held-out
accuracy on 256 problems no run trains on. The numbers it reaches, per seed, are in
``docs/evidence.md`` ("Does RL learn here?") and in ``results/learn_curve.json``.

``matched``: the same GRPO on ``kk_prose`` (the same puzzles and search, written with
Zipf-weighted synonyms and people checked in any order) from a warm start of the pretrained corpus
LM (:mod:`tailtheory.engine.start.corpus_lm`: a byte-level BPE of 4,096 tokens trained on Python's
standard library, so the vocabulary's tail is real text, not unused ids). Its sampled tokens fill
LOPTI's ``pi_old`` bins in about the shares of the paper's Fig. 1(a) (Qwen2.5-7B), and its per-bin
gradient norms fall as in Fig. 1(d) (the regime table in ``docs/regime.md``). What those tokens
do differs: about 90% of the lowest bin's tokens at the warm start are free synonym and order
choices the reward, which reads only the final answer, never sees. ``docs/evidence.md`` ("The
`matched` recipe") gives its bins and learning curve.

``decide``: GRPO on ``kk_knights`` with three people (the same puzzles answered by naming the
truth-tellers in order, ``P0 P2``), from the task's supervised warm start (sampled accuracy in
``[0.225, 0.70]``), lr 1e-4 for 200 steps. Every response token, EOS included, chooses among the
people still to come and the end, and the reward reads it, so its low-probability tokens are
decision forks, not paraphrase: the other end, from ``matched``, of what low-probability tokens
do (:mod:`tailtheory.lopti.decisive.store`). What it matches of the papers: the share of tokens
in LOPTI's lowest bin at its warm start (15.8%, paper 19.2%), of which a share 0.647 [0.572,
0.721] is decisive (295 tokens of 90 prompts, ``results/decisive_decide.json``, under the
ledger's rule of 2026-11-29). What it does not: a worked reasoning trace (its responses are two
to four tokens), the model's size (0.72M parameters, the papers' 1.5B-7B), and learning: its
GRPO does not meet the learning rule of the other recipes, and half-way its lowest bin holds
6.7% of the tokens, too few for a decisive share (114 tokens of 61 prompts: not reportable)
(``docs/evidence.md``, "What low-probability tokens do", gives the designs tried).
"""

from __future__ import annotations

from dataclasses import fields

from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rollout.engine import FAST

RECIPES: dict[str, dict] = {
    "learn": {
        "task": "kk_trace", "n_people": 2, "model": "warm", "method": "grpo",
        "rollout": "exact", "rollout_backend": FAST, "prompts_per_step": 32, "group_size": 8, "lr": 1e-4,
        "steps": 120, "eval_every": 10, "eval_n": 256, "checkpoint_every": 20,
    },
    "matched": {
        "task": "kk_prose", "n_people": 2, "model": "warm", "method": "grpo",
        "rollout": "exact", "rollout_backend": FAST, "prompts_per_step": 32, "group_size": 8,
        "lr": 1e-4,
        "steps": 120, "eval_every": 10, "eval_n": 256, "checkpoint_every": 20,
    },
    "decide": {
        "task": "kk_knights", "n_people": 3, "model": "warm", "method": "grpo",
        "rollout": "exact", "rollout_backend": FAST, "prompts_per_step": 32, "group_size": 8,
        "lr": 1e-4,
        "steps": 200, "eval_every": 10, "eval_n": 256, "checkpoint_every": 20,
    },
}
"""Recipe name -> the :class:`~tailtheory.engine.config.TrainConfig` fields it sets."""

FIXED = ("task", "n_people")
"""Fields no flag may change under a recipe: its warm start and held-out set belong to them."""

DESCRIPTIONS = {
    "learn": "the learning testbed: GRPO raises held-out accuracy on kk_trace (2 people) from "
             "its warm start",
    "decide": "low-probability tokens that decide the answer: Knights and Knaves (3 people) "
              "answered by naming the truth-tellers, every answer token a choice the reward "
              "reads",
    "matched": "the learn testbed in words from a pretrained BPE LM: its sampled tokens match "
               "the histogram of LOPTI's pi_old bins (Fig. 1(a)), not what they do (most "
               "lowest-bin tokens are free synonym or order choices the reward never reads)",
}


def check_recipe(name: str) -> dict:
    """The fields of recipe ``name``; a ``ValueError`` listing the valid recipes otherwise."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; valid recipes: {', '.join(sorted(RECIPES))} "
                         f"(tailtheory train --recipe list)")
    return RECIPES[name]


def recipe_config(name: str, **overrides):
    """The :class:`~tailtheory.engine.config.TrainConfig` of recipe ``name`` with ``overrides``.

    An override of a :data:`FIXED` field to another value is a ``ValueError``; an unknown field
    is one too (``TrainConfig`` names its fields).
    """
    base = check_recipe(name)
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"TrainConfig has no field(s) {unknown}")
    clash = {k: (base[k], v) for k, v in overrides.items() if k in FIXED and v != base[k]}
    if clash:
        k, (fixed, given) = next(iter(clash.items()))
        raise ValueError(f"recipe {name!r} fixes {k} = {fixed!r} (its warm start and held-out "
                         f"problems are that task's); --{k.replace('_', '-')} {given!r} "
                         f"contradicts it: drop the flag, or run without --recipe")
    return TrainConfig(**{**base, **overrides})


def describe() -> str:
    """One block per recipe: its name, what it is for and the fields it sets."""
    out = []
    for name in sorted(RECIPES):
        sets = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in RECIPES[name].items())
        out.append(f"{name}: {DESCRIPTIONS.get(name, '')}\n  sets {sets}\n  fixed: "
                   f"{', '.join(FIXED)}")
    return "\n".join(out)
