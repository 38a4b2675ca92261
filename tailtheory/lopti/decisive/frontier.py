"""The designs tried for a recipe whose low-probability tokens decide the answer, judged on their
warm starts: lowest-bin share against decisive share, one point each.

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 1(a)'s lowest bin (19.2% of Qwen2.5-7B's
sampled tokens on K&K), split by :mod:`tailtheory.lopti.decisive.branches`.

Each design is a task and its supervised warm start (:data:`DESIGNS`; built once and cached like
every warm start). Its probe is one GRPO batch of 32 prompts x 8 responses at temperature 1, the
first :data:`PROMPTS` prompts' responses probed at the calibrated ``tau`` and ``K``. The target
region is at least :data:`LOW_MIN` of the response tokens in the lowest bin with at least half
of those decisive; whether a design also learns is read from its GRPO runs, not here. Stored in
``results/decisive_frontier.json`` (``tailtheory measure decisive_frontier``). Those GRPO runs,
made while choosing, are recorded once in ``results/decisive_designs.json``, each with the
``tailtheory train`` command that ran it.

Claims: L2, L3, L6 (which recipe can carry them where low-probability tokens decide).
"""

from __future__ import annotations

from tailtheory.core.measurements import measured
from tailtheory.core.provenance import measured_on
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rollout.engine import FAST
from tailtheory.engine.load import load_start, warm_config
from tailtheory.engine.start.sft import config_hash
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.lopti.decisive.branches import LEGACY_SAMPLER
from tailtheory.lopti.decisive.probe import OTHERS, measure_decisiveness
from tailtheory.lopti.decisive.report import bin_summary

DESIGNS = {"kk, 3 people": ("kk", 3), "kk, 4 people": ("kk", 4),
           "kk_knights, 3 people": ("kk_knights", 3), "chain_sum": ("chain_sum", 3)}
"""Design -> ``(task, people)``: Knights and Knaves answered directly (``T F T``), with four
people, answered by naming the truth-tellers (every token a choice among several), and sums of
small integers (digits: a choice among ten)."""

PROMPTS = 16
"""Prompts of the probed batch whose responses are probed (8 responses each)."""

LOW_MIN = 0.096
"""The lowest-bin share a design must reach (half of LOPTI's 19.2%)."""

VERSION = 1

TAU, K = 0.081, 64
"""The threshold and rollouts of the first calibration (version 1, ``inverse_cdf`` branches),
under which this record was measured and is made again: the frontier is a record of the designs
judged before the rule of 2026-11-29; the decisiveness of today's design search is
:mod:`tailtheory.lopti.decisive.gate`'s."""

SAMPLER = LEGACY_SAMPLER
"""The branches' pairing of this record (version 1)."""

COMMAND = measure_command("decisive_frontier")


def design_config(name: str) -> TrainConfig:
    """The GRPO batch's config of design ``name`` (its warm start, 32 prompts x 8, ``exact``)."""
    if name not in DESIGNS:
        raise ValueError(f"unknown design {name!r}; valid: {', '.join(DESIGNS)}")
    task, people = DESIGNS[name]
    return TrainConfig(task=task, n_people=people, model="warm", rollout="exact",
                       rollout_backend=FAST, prompts_per_step=32, group_size=8, seed=1)


def frontier_config() -> dict:
    """What the stored frontier is keyed by: each design's warm start and the sizes."""
    return {"version": VERSION, "tau": TAU, "K": K, "prompts": PROMPTS,
            "others": OTHERS,
            "designs": {n: config_hash(warm_config(design_config(n))) for n in DESIGNS}}


def measure_frontier(progress: bool = True) -> dict:
    """Design -> its lowest bin's share and split (:func:`point`), the measurement, and the warm
    start's fingerprint and the machine (:func:`~tailtheory.core.provenance.measured_on`)."""
    out = {}
    for name in DESIGNS:
        cfg = design_config(name)
        model, task = load_start(cfg)
        named = measured_on(model)
        data = measure_decisiveness(model, task, cfg, (1,), 1, K, OTHERS, PROMPTS, TAU, progress,
                                    sampler=SAMPLER)
        out[name] = {"point": point(data), "data": data, **named}
    return out


def point(data: dict) -> dict:
    """The lowest bin of one measurement: ``token_frac``, ``decisive_share``, ``helps``,
    ``hurts``, ``format_breaking``."""
    low = bin_summary(data, TAU).iloc[0]
    return {k: float(low[k]) for k in ("token_frac", "decisive_share", "helps", "hurts",
                                       "format_breaking")}


def frontier(profile: str = "quick") -> dict:
    """The stored frontier (``quick``) or a new one, stored (``thorough``)."""
    return measured("decisive_frontier", frontier_config(), lambda: measure_frontier(True),
                    profile, COMMAND)


def plot_frontier(points: dict, recipes: dict | None = None):
    """Decisive share against lowest-bin share: one point per design (``points``: name ->
    :func:`point`), the recipes' warm starts (``recipes``: name -> point) as stars, the target
    region shaded. Returns ``(figure, table)``."""
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.axvspan(LOW_MIN, 1, ymin=0.5, ymax=1, color="C2", alpha=0.12, label="target region")
    rows = []
    for kind, group, marker in (("design", points, "o"), ("recipe", recipes or {}, "*")):
        for name, p in group.items():
            ax.scatter(p["token_frac"], p["decisive_share"], marker=marker, s=60 if
                       marker == "*" else 30)
            ax.annotate(name, (p["token_frac"], p["decisive_share"]), fontsize=7,
                        xytext=(4, 3), textcoords="offset points")
            rows.append({"name": name, "kind": kind, **p})
    ax.set_xlim(0, max([0.45] + [r["token_frac"] * 1.1 for r in rows]))
    ax.set_ylim(0, 1)
    ax.set_xlabel("share of sampled response tokens with pi_old <= 0.25")
    ax.set_ylabel("share of those that decide the answer")
    ax.set_title("What low-probability tokens do, per warm start", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


MEASURE = register_measure(Measure(
    "decisive_frontier", "the designs tried for the decide recipe: lowest-bin share against "
    "decisive share of each warm start (L2, L3, L6)",
    f"not recorded; {len(DESIGNS)} warm starts (built when not cached), K = {K} rollouts a "
    f"branch for every lowest-bin token of {PROMPTS} prompts' responses",
    frontier_config, lambda: frontier("thorough")))

DESIGN_RUNS = register_measure(Measure(
    "decisive_designs", "GRPO runs of the designs tried for the decide recipe, made while "
    "choosing it (exploratory, no verdict; each row holds its tailtheory train command)"))
