"""The faults of the dumps, first in the report: an error refuses the dumps, a warning is named
(:mod:`tailtheory.diagnose.faults` for the checks and their thresholds).
"""

from __future__ import annotations

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.faults import FaultScan
from tailtheory.diagnose.sections.base import Diagnosis, Section


NAME = "faults"


class FaultSums:
    """The fault checks' sums (:class:`~tailtheory.diagnose.faults.FaultScan`) over the run."""

    def __init__(self, acc):
        self.scan = FaultScan(acc.files, acc.kinds)

    def add(self, t) -> None:
        """Fold one batch in (its every row; ``ValueError`` at once on a log-prob above 1)."""
        self.scan.add(t.batch, t.rows)


def faults_section(acc: Accumulator, d: Diagnosis) -> None:
    """Run the fault checks (:mod:`tailtheory.diagnose.faults`): an error raises
    ``ValueError``; warnings go first in the report and into ``summary.json``'s ``faults``."""
    found = acc.folds[NAME].scan.faults(acc.bins)
    d.summary["faults"] = [f.as_dict() for f in found]
    d.points["faults"] = found
    d.verdicts["faults"] = ([f"{f.name}: {f.message}." for f in found] or
                            ["none found (log-probs <= 0, not probabilities, no off-by-one shift, "
                             "one temperature on both sides)."])


SECTION = Section(NAME, "Faults of the dumps", "the log-probs' domain, alignment and temperature",
                  lambda ctx, d: faults_section(ctx.acc, d), FaultSums)
