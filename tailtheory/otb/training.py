"""OTB in training (claim O6, part b): OTB at N = 4 against GRPO at N = 4 and at a large N.

Source: OTB (Li et al., arXiv 2602.07078), abstract: "N = 4 with OTB matches N = 32 without;
over 65% fewer tokens". The claim is about training: the score reached for the tokens spent.
Here: task ``kk_trace`` on the ``learn`` recipe (``exact`` rollouts, 32 prompts a step, 120
steps, seeds 1-5); OTB at N = 4, GRPO at N = 4 and at N = :data:`LARGE_N` (N = 32 would double
the largest batch this CPU trains). At equal steps OTB N = 4 spends ``4 / LARGE_N`` of GRPO
N = 16's tokens; reward and held-out accuracy are also drawn against the tokens consumed
(``rollout/tokens`` summed).

Verdict (fixed before measuring), with ``compare`` the 2-standard-error rule of
:mod:`tailtheory.experiments.study` on final reward (mean of the last 10 steps):
``TOY-SCALE`` when (i) the group size matters here — GRPO N = 16 beats GRPO N = 4 — and
(ii) OTB N = 4 is not below GRPO N = 16 (``compare(OTB 4, GRPO 16)`` is not REFUTED) and
(iii) OTB N = 4 beats GRPO N = 4; ``REFUTED`` when (i) holds and OTB N = 4 is below GRPO N = 16
by > 2 se; ``NOT-REPRODUCED`` otherwise (in particular when a larger group does not train
better: then nothing is there for OTB to match). Held-out accuracy is reported beside it.
"""

from __future__ import annotations

from dataclasses import replace

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.experiments.measures import Measure, register_measure
from tailtheory.experiments.presets import SEEDS, train_config
from tailtheory.experiments.study import Arm, Study, register_study

OTB_N = 4
"""OTB's group size in the claim."""

LARGE_N = 16
"""The large GRPO group (the claim's is 32; 16 keeps a step at the main runs' 32 responses)."""

O6_CONFIGS = {f"OTB N={OTB_N}": ("otb", OTB_N), f"GRPO N={OTB_N}": ("grpo", OTB_N),
              f"GRPO N={LARGE_N}": ("grpo", LARGE_N)}
"""Label -> (method, group size)."""


RECIPE_N = 8
"""The learning recipe's own group size: on ``learn`` its GRPO arm (``GRPO N=8``, tagged
``role="reference"``) is the LOPTI study's GRPO runs, reported beside the verdict."""


def o6_arms(preset: str) -> list[Arm]:
    """OTB N=4, GRPO N=4 and GRPO N=16 over the preset's seeds (learn: the recipe's 32 prompts,
    120 steps, zero-mismatch rollouts, plus ``GRPO N=8``)."""
    base, seeds = train_config(preset), SEEDS[preset]
    configs = dict(O6_CONFIGS)
    if preset == "learn":
        configs[f"GRPO N={RECIPE_N}"] = ("grpo", RECIPE_N)
    return [Arm(label, tuple(replace(base, method=m, group_size=n, seed=s) for s in seeds),
                {"method": m, "group_size": n,
                 "role": "reference" if label not in O6_CONFIGS else "main"})
            for label, (m, n) in configs.items()]


STUDY = register_study(Study("otb_learn", o6_arms, series={"tokens": "rollout/tokens"}))
"""O6 (b) on the learning testbed (preset ``learn``: the recipe, ``exact`` rollouts, 32 prompts
a step, 120 steps, seeds 1-5), stored run by run in ``results/otb_learn.json`` (``tailtheory
study otb_learn``): per run its summary, reward and held-out curves and response tokens per
step; ``GRPO N=8`` (the recipe's own) beside the verdict."""


def o6_training_evidence(data) -> Evidence:
    """O6 (b) from the study's numbers (rule in the module docstring)."""
    m = STUDY.measurement(data)
    otb, small, large = (m.label(method=k, group_size=n, role="main")
                         for k, n in (("otb", OTB_N), ("grpo", OTB_N), ("grpo", LARGE_N)))
    size = m.compare(large, small, "final_reward")
    match = m.compare(otb, large, "final_reward")
    gain = m.compare(otb, small, "final_reward")
    mean = lambda label, k: sum(r[k] for r in data[label]) / len(data[label])  # noqa: E731
    tokens = {label: sum(sum(r["tokens"]) for r in data[label]) / len(data[label])
              for label in data}
    nums = {f"{label}:final_reward": mean(label, "final_reward") for label in data}
    nums.update({f"{label}:final_heldout": mean(label, "final_eval") for label in data})
    nums.update({f"{label}:first_reward": mean(label, "first_reward") for label in data})
    nums.update({"large_minus_small": size.delta, "large_minus_small_se": size.se,
                 "otb_minus_large": match.delta, "otb_minus_large_se": match.se,
                 "otb_minus_small": gain.delta, "otb_minus_small_se": gain.se,
                 "token_ratio_otb_over_large": tokens[otb] / tokens[large]})
    if size.verdict != Verdict.TOY_SCALE:
        verdict = Verdict.NOT_REPRODUCED
    elif match.verdict == Verdict.REFUTED:
        verdict = Verdict.REFUTED
    else:
        verdict = (Verdict.TOY_SCALE if gain.verdict == Verdict.TOY_SCALE
                   else Verdict.NOT_REPRODUCED)
    return Evidence(verdict, nums, f"criterion: GRPO N={LARGE_N} beats GRPO N={OTB_N}, OTB "
                    f"N={OTB_N} is not below GRPO N={LARGE_N} and beats GRPO N={OTB_N} (final "
                    f"reward, last 10 steps, 2 se over seeds)")


SUPERSEDED = register_measure(Measure(
    "otb_training", "O6 in the no-learning regime (full preset, 3 seeds): OTB N = 4 against "
    "GRPO N = 4 and N = 16", superseded="study otb_learn"))
