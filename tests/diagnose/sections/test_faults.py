"""The faults section (``tailtheory.diagnose.sections.faults``): the fault checks folded over the
run, their warnings named first."""

from tailtheory.diagnose.faults import FaultScan
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.faults import SECTION


def test_faults_first_and_folded(run):
    acc, d, recs = run
    scan = acc.folds["faults"].scan
    assert isinstance(scan, FaultScan) and scan.reg[0] == len(recs)
    assert SECTIONS[0] is SECTION and SECTION.figure is None
    assert d.summary["faults"] == [] and d.verdicts["faults"][0].startswith("none found")
