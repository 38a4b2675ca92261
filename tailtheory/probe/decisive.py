"""``tailtheory probe decisiveness``: which of a policy's low-probability tokens decide its answer.

The probe samples one GRPO batch of a task from a checkpoint folder (``--model PATH --task T``,
the folder a run or ``save_pretrained`` wrote, with its tokenizer) or from a recipe's policy
(``--recipe R --policy warm|mid``), and estimates the decisiveness ``D`` of every lowest-bin token
of its first ``--prompts`` prompts' responses and of ``--others`` tokens above that bin
(:mod:`tailtheory.lopti.decisive.probe`), with the calibrated threshold and rollouts
(:mod:`tailtheory.lopti.decisive.calibration`). It writes, into ``--out``: every probed token
(``decisive_tokens.csv``), the bins split into decisive and free tokens with Figure 1(d) split in
two (``decisive_split.png``, ``decisive_bins.csv``), ``D`` against ``p`` by role
(``decisive_vs_p.png``), the roles' table on the ``kk`` tasks (``decisive_roles.csv``), the
lowest bin's three-way calls by role (``decisive_noise.csv``) and the record
``probe_decisiveness.json`` (:func:`tailtheory.probe.run.write_result`; its ``result`` holds the
noise summary).

The branches are coupled by word (``--sampler coupled``, :mod:`tailtheory.lopti.decisive.coupled`;
``inverse_cdf``: the pairing of the stored measurements). The printed line shows the noise
(:mod:`tailtheory.lopti.decisive.noise`): the lowest bin's excess mean ``D`` and debiased RMS
with prompt-clustered intervals, the three-way calls, and the decisive share only from at least
200 lowest-bin tokens of 40 prompts (else ``not reportable`` with the counts).

Cost: ``2 K`` continuations per probed token, each at most the response's remaining length;
they decode in chunks of at most ``2**26 / V`` rows, so a step's logits stay under 256 MB.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tailtheory.core.checks import check_positive_int
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.devices import DEVICES, resolve_device
from tailtheory.engine.rollout.engine import FAST
from tailtheory.engine.load import load_start
from tailtheory.engine.tasks.task import TASKS
from tailtheory.experiments.policies import POLICIES, grpo_config, probed_policy
from tailtheory.experiments.recipes import check_recipe
from tailtheory.lopti.decisive import calibration as cal
from tailtheory.lopti.decisive.branches import SAMPLERS, check_sampler
from tailtheory.lopti.decisive.noise import noise_summary, noise_table, noise_text
from tailtheory.lopti.decisive.probe import OTHERS, PROBE_PROMPTS, measure_decisiveness
from tailtheory.lopti.decisive.report import (bin_summary, plot_d_vs_p, plot_split,
                                              role_summary, token_table)
from tailtheory.probe.run import ProbeResult

FAMILY = "decisiveness"


@dataclass(frozen=True)
class DecisiveConfig:
    """One decisiveness probe; checked when built (one line of error each)."""

    model: str | None = None
    """A checkpoint folder, or None with ``recipe``."""
    recipe: str | None = None
    """A recipe whose ``policy`` is probed (its task and sizes), or None with ``model``."""
    policy: str = "warm"
    task: str = "kk_trace"
    """The folder's task (ignored with ``recipe``)."""
    n_people: int = 2
    device: str = "auto"
    K: int | None = None
    """Rollouts a branch (None: the calibrated :data:`~tailtheory.lopti.decisive.calibration.K`)."""
    prompts: int = PROBE_PROMPTS
    others: int = OTHERS
    seed: int = 1
    """The GRPO batch: the problems and draws of step 0 of a run with this seed."""
    tau: float | None = None
    """The threshold (None: the calibrated :data:`~tailtheory.lopti.decisive.calibration.TAU`)."""
    sampler: str = SAMPLERS[0]
    """How the two branches share their randomness
    (:data:`~tailtheory.lopti.decisive.branches.SAMPLERS`; coupled by word by default)."""
    family: str = FAMILY

    @property
    def output(self) -> str:
        """The name of the probe's files, record and default folder (its family's)."""
        return self.family

    def __post_init__(self):
        if self.K is None:
            object.__setattr__(self, "K", cal.K)
        if self.tau is None:
            object.__setattr__(self, "tau", cal.TAU)
        if (self.model is None) == (self.recipe is None):
            raise ValueError("give --model PATH (with --task) or --recipe NAME, one of them")
        if self.recipe is not None:
            check_recipe(self.recipe)
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; valid: {', '.join(POLICIES)}")
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; valid: {', '.join(sorted(TASKS))}")
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)}")
        check_sampler(self.sampler)
        check_positive_int(self.K, "--K", 2)
        check_positive_int(self.prompts, "--prompts")
        check_positive_int(self.others, "--others", 0)
        check_positive_int(self.seed, "--seed", 0)


def _policy(config: DecisiveConfig):
    """``(model, task, cfg, label)`` of the probed policy."""
    if config.recipe is not None:
        model, task = probed_policy(config.policy, config.recipe, progress=False)
        return model, task, grpo_config(config.recipe), f"{config.recipe} {config.policy}"
    cfg = TrainConfig(task=config.task, n_people=config.n_people, model=config.model,
                      rollout="exact", rollout_backend=FAST,
                      prompts_per_step=max(config.prompts, 1), group_size=8,
                      device=resolve_device(config.device))
    model, task = load_start(cfg)
    return model.to(cfg.device), task, cfg, str(config.model)


def run_decisiveness(config: DecisiveConfig, progress: bool = True) -> ProbeResult:
    """Run the probe (module docstring); returns its figures, tables and summary."""
    t0 = time.perf_counter()
    model, task, cfg, label = _policy(config)
    data = measure_decisiveness(model, task, cfg, seeds=(config.seed,), K=config.K,
                                others=config.others, prompts=config.prompts, tau=config.tau,
                                progress=progress, sampler=config.sampler)
    bins = bin_summary(data, config.tau)
    res = ProbeResult(config, str(next(model.parameters()).device),
                      f"{len(data['tokens'])} tokens of {data['batches'][0]['responses']} "
                      f"responses of {label} ({task.name}), K = {config.K}, tau = {config.tau:g}, "
                      f"{config.sampler} branches")
    noise = noise_summary(data, config.tau, cfg.group_size)
    res.text += f"; {noise_text(noise)}"
    res.record["noise"] = noise
    res.figures["decisive_split"] = plot_split({label: bins})
    res.figures["decisive_vs_p"] = plot_d_vs_p(data, config.tau, label)
    res.tables["decisive_tokens"] = token_table(data, config.tau)
    res.tables["decisive_bins"] = bins
    res.tables["decisive_roles"] = role_summary(data, config.tau)
    res.tables["decisive_noise"] = noise_table(noise)
    res.summary = bins[["bin", "probed", "token_frac", "decisive_share", "helps", "hurts",
                        "adv_decisive", "adv_free", "D_mean"]].assign(note="")
    # the shares of D >= tau beside the rule's verdict on the lowest bin's share
    res.summary.loc[0, "note"] = noise["share"]["note"]
    res.seconds = time.perf_counter() - t0
    return res
