"""One type for every training experiment: arms of seeded runs, a study over them, a measurement
that compares arms with one rule.

- An :class:`Arm` is a label, its configs (one per seed) and tags that say what it is
  (``{"method": "ar"}``, ``{"path": "fp8", "pi_old": "bypass"}``): code selects arms by tag,
  never by parsing labels.
- A :class:`Study` names its arms per preset, the per-step series it keeps of each run, optional
  numbers computed from token dumps, and the stored measurement it writes run by run
  (``results/<name>.json``, :mod:`tailtheory.experiments.incremental`; ``tailtheory study NAME``
  trains what is missing). :meth:`Study.measure` trains what the run cache lacks
  (:mod:`tailtheory.experiments.runs`) and reads every run into plain numbers; :meth:`Study.data`
  reads the stored runs (``quick``) or trains and stores what is missing first (``thorough``).
- A :class:`Measurement` holds those numbers (label -> one row per seed) with the arms' tags;
  :meth:`Measurement.compare` is the one verdict rule of every training claim:

      delta = mean_s(x_a) - mean_s(x_b),   se = sqrt(var_s(x_a)/n_a + var_s(x_b)/n_b)

  ``TOY-SCALE`` when ``delta > Z_CRIT * se``, ``REFUTED`` when ``delta < -Z_CRIT * se``,
  ``NOT-REPRODUCED`` otherwise (``Z_CRIT = 2``).

A section registers its studies on import (:func:`register_study`); :func:`get_study` finds a
study by name, importing each section's ``training`` module the way the claims registry imports
each ``claims`` module, so one section can read another's runs without importing it.

Example (a complete study: two arms, a measurement, a verdict)::

    from dataclasses import replace
    from tailtheory.experiments.presets import SEEDS, train_config
    from tailtheory.experiments.study import Arm, Study

    def arms(preset):
        base = train_config(preset)
        return [Arm(name, tuple(replace(base, method=m, seed=s) for s in SEEDS[preset]),
                    {"method": m}) for name, m in (("GRPO", "grpo"), ("AR", "ar"))]

    study = Study("ar_vs_grpo", arms, measure_preset="quick")
    m = study.measure("quick")                 # trains (or finds) 2 arms x seeds
    m.compare("AR", "GRPO", "final_reward")    # Comparison(delta, se, verdict)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from tailtheory.core.measurements import PROFILES, StaleMeasurement, measurement_path
from tailtheory.core.registry import load_catalog
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.load import read_provenance
from tailtheory.experiments.comparison import Measurement
from tailtheory.experiments.incremental import (load_done, store_done, stored_record,
                                                study_identities)
from tailtheory.experiments.run_numbers import read_lines, read_tokens, run_curves, run_summary
from tailtheory.experiments.runs import (cpu_seconds, finished_steps, run_identity, run_key,
                                         run_many, runs_root)

# ---- arms and studies -------------------------------------------------------------------------

Series = Mapping[str, "str | Callable[[dict], float]"]
"""Per-step series a study keeps: name -> a metric key of the step's line, or a function of it."""


@dataclass(frozen=True)
class Arm:
    """One configuration of a study over seeds: ``configs[i]`` is seed ``i``'s run."""

    label: str
    configs: tuple
    tags: Mapping[str, object] = field(default_factory=dict)
    """What the arm is (``method``, ``path``, ``pi_old``, ``knob``, ``role`` ...), for selection."""
    tokens: bool = True
    """Whether runs that dump their tokens get the study's token numbers (an arm that re-reads
    another arm's runs says False)."""

    def __post_init__(self):
        if not self.label:
            raise ValueError("an arm needs a label")
        if not self.configs:
            raise ValueError(f"arm {self.label!r} has no configs")
        object.__setattr__(self, "configs", tuple(self.configs))
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))

    def matches(self, **tags) -> bool:
        """Whether every given tag has the given value (``label=`` matches the label)."""
        mine = {**self.tags, "label": self.label}
        return all(k in mine and mine[k] == v for k, v in tags.items())


@dataclass(frozen=True)
class Study:
    """A training experiment: its arms per preset, what it keeps of each run, where it is stored."""

    name: str
    """The stored measurement ``results/<name>.json`` (letters, digits, ``_``, ``-``)."""
    arms: Callable[[str], list]
    """Preset -> the study's :class:`Arm` s (labels unique)."""
    series: Mapping = field(default_factory=dict)
    """Per-step series kept beside the summary and the reward / held-out curves (:data:`Series`)."""
    tokens: Mapping = field(default_factory=dict)
    """Name -> function of a run's token table (:func:`read_tokens`) to a dict of numbers, for
    the runs that dump their tokens."""
    measure_preset: str = "learn"
    """The preset whose runs the stored measurement holds (the learning testbed's)."""

    def plan(self, preset: str) -> list[Arm]:
        """The arms of ``preset``, checked (unique labels, every config a ``TrainConfig``)."""
        arms = list(self.arms(preset))
        labels = [a.label for a in arms]
        if len(set(labels)) != len(labels):
            raise ValueError(f"study {self.name!r} repeats an arm label: {labels}")
        for a in arms:
            if not all(isinstance(c, TrainConfig) for c in a.configs):
                raise TypeError(f"arm {a.label!r} of {self.name!r} holds a non-TrainConfig")
        return arms

    def configs(self, preset: str, labels=None) -> dict[str, list]:
        """Label -> configs (one per seed), of the arms named in ``labels`` (default: all)."""
        arms = self.plan(preset)
        if labels is not None:
            unknown = sorted(set(labels) - {a.label for a in arms})
            if unknown:
                raise ValueError(f"study {self.name!r} has no arm(s) {unknown}; arms: "
                                 f"{', '.join(a.label for a in arms)}")
        return {a.label: list(a.configs) for a in arms if labels is None or a.label in labels}

    def identity(self, preset: str) -> dict:
        """What the stored measurement is keyed by: every run's config and warm start, less its
        directory, thread count and device (the same runs elsewhere are the same experiment)."""
        return {a.label: [run_identity(c, "store") for c in a.configs] for a in self.plan(preset)}

    def run(self, preset: str, workers: int = 1, progress: bool = True,
            labels=None) -> dict[str, list]:
        """Train (or find in the run cache) every run of the arms ``labels`` (default: all);
        label -> run directories."""
        plan = self.configs(preset, labels)
        paths = iter(run_many([c for cs in plan.values() for c in cs], workers=workers,
                              progress=progress))
        return {label: [next(paths) for _ in cs] for label, cs in plan.items()}

    def status(self, preset: str) -> dict[str, dict[str, list]]:
        """Label -> the arm's configs by where their run is: ``stored`` (its row is in
        ``results/<name>.json`` under today's config; only on :attr:`measure_preset`),
        ``cached`` (else: the run cache holds it at full length) or ``train`` (neither: ``tailtheory
        study`` trains it)."""
        stored = self.stored_seeds(preset)
        out = {}
        for a in self.plan(preset):
            where = {"stored": [], "cached": [], "train": []}
            for c in a.configs:
                done = finished_steps(runs_root() / run_key(c)) >= c.steps
                where["stored" if c.seed in stored.get(a.label, ()) else
                      "cached" if done else "train"].append(c)
            out[a.label] = where
        return out

    def stored_seeds(self, preset: str) -> dict[str, set]:
        """Label -> the seeds whose rows ``results/<name>.json`` holds under today's configs;
        none on another preset than :attr:`measure_preset`."""
        if preset != self.measure_preset:
            return {}
        record, want = stored_record(self.name), study_identities(self, preset)
        return {label: {r["seed"] for r, i in zip(rows, record["config"].get(label, []))
                        if want.get(label, {}).get(r["seed"]) == i}
                for label, rows in record.get("data", {}).items()}

    def run_numbers(self, run, cfg, arm: Arm | None = None) -> dict:
        """One run's numbers: summary, curves, CPU seconds (when the runner recorded them), the
        study's series and (if it dumped its tokens and the arm takes them) its token numbers."""

        lines = read_lines(run, cfg.steps)
        out = {**run_summary(run, cfg.steps), **run_curves(run, cfg.steps)}
        if (cpu := cpu_seconds(run)) is not None:
            out["cpu_seconds"] = cpu
        prov = read_provenance(run)
        if prov is not None:
            out["provenance"] = prov
        for name, key in self.series.items():
            out[name] = [key(m) if callable(key) else m[key] for m in lines]
        if self.tokens and cfg.dump_tokens and (arm is None or arm.tokens):
            df = read_tokens(run, cfg.steps)
            out.update({name: fn(df) for name, fn in self.tokens.items()})
        return out

    def measure(self, preset: str | None = None, workers: int = 1, progress: bool = True,
                labels=None) -> Measurement:
        """Train what is missing and read every run of the arms ``labels`` (default: all)."""
        preset = preset or self.measure_preset
        arms = [a for a in self.plan(preset) if labels is None or a.label in labels]
        runs = self.run(preset, workers, progress, labels)
        data = {a.label: [{"seed": c.seed, **self.run_numbers(p, c, a)}
                          for c, p in zip(a.configs, runs[a.label])] for a in arms}
        return Measurement(data, arms, self.name)

    def measurement(self, data) -> Measurement:
        """``data`` (label -> rows over seeds) as a :class:`Measurement` with the tags of
        :attr:`measure_preset`'s arms (a measurement is returned as it is)."""
        if isinstance(data, Measurement):
            return data
        return Measurement(data, self.plan(self.measure_preset), self.name)

    @property
    def command(self) -> str:
        """The command that trains what the stored measurement lacks and stores it."""
        return f"tailtheory study {self.name}"

    def data(self, profile: str, workers: int = 2) -> Measurement:
        """``quick``: the stored runs of :attr:`measure_preset` (``results/<name>.json``, every
        row checked against today's config); ``thorough``: first trains what the run cache lacks,
        arm by arm (``workers`` runs at a time), storing after each arm. A seed not stored is an
        error naming it and :attr:`command` (a verdict never rests on part of its seeds)."""

        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
        if profile == "thorough":
            for arm in self.plan(self.measure_preset):
                self.run(self.measure_preset, workers, labels=[arm.label])
                store_done(self)
        m = load_done(self)
        if m.missing:
            raise StaleMeasurement(f"{measurement_path(self.name)} lacks runs (arm: seeds) "
                                   f"{m.missing}; train and store them with: {self.command}")
        return m


# ---- the studies of every section, by name ----------------------------------------------------

_STUDIES: dict[str, Study] = {}


def register_study(study: Study) -> Study:
    """Register ``study`` under its name (a name registered twice raises); returns it."""
    if study.name in _STUDIES and _STUDIES[study.name] is not study:
        raise ValueError(f"study {study.name!r} is already registered")
    _STUDIES[study.name] = study
    return study


def studies() -> Mapping[str, Study]:
    """Every registered study by name, the package's catalog loaded first
    (:func:`tailtheory.core.registry.load_catalog`: the learning curve and each section's
    studies)."""
    load_catalog()
    return MappingProxyType(_STUDIES)


def get_study(name: str) -> Study:
    """The registered study ``name``; an unknown name lists the valid ones."""
    found = studies()
    if name not in found:
        raise ValueError(f"unknown study {name!r}; studies: {', '.join(sorted(found))}")
    return found[name]
