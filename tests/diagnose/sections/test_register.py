"""The register section (``tailtheory.diagnose.sections.register``): the placement's lines and
``register.json``, written only for a placed run."""

import json

from tailtheory.diagnose.sections.base import Diagnosis
from tailtheory.diagnose.sections.register import SECTION


def test_register_lines_and_file(run):
    acc, d, recs = run
    assert d.points["register"]["mean_k3"] == d.summary["k3"]
    placed = json.loads(SECTION.files(d)["register.json"])
    assert placed["mean_k3"] == d.summary["k3"] and d.verdicts["register"][-1].startswith("caveat")
    assert SECTION.files(Diagnosis(summary={})) == {}
