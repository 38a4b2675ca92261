"""The sections of ``tailtheory diagnose``'s report: one module per section, listed once below.

Each module defines its ``SECTION`` (:class:`~tailtheory.diagnose.sections.base.Section`: name,
title, claims, fold, table, figure, further files and its keys of ``summary.json``), and holds
everything of its section: its sums, its checks and their thresholds, its verdict lines.
:data:`SECTIONS` is the report's order: the :class:`~tailtheory.diagnose.aggregate.Accumulator`
folds each batch into every section's sums, :func:`tailtheory.diagnose.build.diagnosis` fills
the tables, summary keys and verdict lines in this order (the summary's schema,
:data:`tailtheory.diagnose.build.SUMMARY_KEYS`, is gathered from the sections' records), and
:mod:`tailtheory.diagnose.report` draws the figures and writes the HTML in it.

Adding a section: one file here defining ``SECTION`` (its ``summary`` keys with it), and one
line in :data:`SECTIONS`, its module's name.

Modules, one line each:

- ``base``: the ``Section`` record, ``Context``, ``Diagnosis``, the verdicts' thresholds, wording.
- ``faults``: the dumps' faults (domain, shift, temperature, short top-k lists): checks, section.
- ``envelope``: ``|Delta|`` against p with M3's envelope, the head/tail ratio (M3, M7).
- ``beyond_noise``: the run's numerical noise as M3's envelope (samples as units) and the
  samples beyond it (Benjamini-Hochberg); rounding, temperature and truncation run-wide (M3).
- ``noise_checks``: not a section, ``beyond_noise``'s run-wide checks (rounding, temperature,
  truncation) and their lines.
- ``tail_bias``: mean signed Delta by probability, the tail bias (M4, M5).
- ``accumulation``: the sequence log-ratio against tail tokens and sqrt(T) (M6).
- ``trm``: TRM's acceptance against threshold and length (T12).
- ``dvp``: what DVP's min-p rule at each rho would prune (P1, P2, P4).
- ``steps``: k1, k3 and ``|Delta|`` per step (TIM's monitors; V2, V5).
- ``drift``: when the mismatch started to grow (CUSUM on each step's log k3) and whether by
  length or peakiness (an exact split of the change of log k3); V6's harm edge per step
  (NeMo-RL issue 1801, Precision-RL issue 10).
- ``onset``: not a section, ``drift``'s onset test: a one-sided CUSUM, its threshold simulated
  on flat AR(1) series; its measured false alarms.
- ``certify``: each step's mean k3 against a bar (prime-rl's PR 2672): pass, fail, undecided.
- ``resume``: the mismatch and reward across a resume (``--resume-at``): a jump beyond 4
  robust sd of the step-to-step changes (slime issue 1695).
- ``ratios``: the raw importance ratios against the corrections' caps (V4).
- ``seq_ratio``: each response's log-ratio as mean per-token log-ratio x length; the responses
  each correction truncates or masks (M6, V4).
- ``logged_ratio``: the framework's logged ratio against the log-probs: sum, mean, sign (V4).
- ``register``: the run's mean k3 on the dose-response register (V6), and ``register.json``.
- ``bottom_line``: what to do, from the run's place on the register and the faults found.
"""

from importlib import import_module

from tailtheory.diagnose.sections.base import Context, Diagnosis, Section

SECTIONS: tuple[Section, ...] = tuple(
    import_module(f"tailtheory.diagnose.sections.{name}").SECTION for name in (
        "faults",
        "envelope",
        "beyond_noise",
        "tail_bias",
        "accumulation",
        "trm",
        "dvp",
        "steps",
        "drift",
        "certify",
        "resume",
        "ratios",
        "seq_ratio",
        "logged_ratio",
        "register",
        "bottom_line",
    ))
"""The report's sections, in its order (the fault checks first, the bottom line last): one line
per section, naming its module here."""

__all__ = ["SECTIONS", "Context", "Diagnosis", "Section"]
