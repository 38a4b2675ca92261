"""The sections of ``tailtheory diagnose``'s report: one module per section, listed once below.

Each module defines its ``SECTION`` (:class:`~tailtheory.diagnose.sections.base.Section`: name,
title, claims, fold, table, figure). :data:`SECTIONS` is the report's order: the
:class:`~tailtheory.diagnose.aggregate.Accumulator` folds each batch into every section's sums,
:func:`tailtheory.diagnose.build.diagnosis` fills the tables, summary keys and verdict lines in
this order, and :mod:`tailtheory.diagnose.report` draws the figures and writes the HTML in it.

Adding a section: one file here defining ``SECTION``, one line in :data:`SECTIONS`, and its
``summary.json`` keys in :data:`~tailtheory.diagnose.sections.base.SUMMARY_KEYS` (the one
schema of the summary, in its order).
"""

from tailtheory.diagnose.sections import (accumulation, bottom_line, dvp, envelope, faults, ratios,
                                          register, steps, tail_bias, trm)
from tailtheory.diagnose.sections.base import Context, Diagnosis, Section

SECTIONS = (
    faults.SECTION,
    envelope.SECTION,
    tail_bias.SECTION,
    accumulation.SECTION,
    trm.SECTION,
    dvp.SECTION,
    steps.SECTION,
    ratios.SECTION,
    register.SECTION,
    bottom_line.SECTION,
)
"""The report's sections, in its order (the fault checks first, the bottom line last)."""

__all__ = ["SECTIONS", "Context", "Diagnosis", "Section"]
