"""One diagnosis shared by the tests of the sections: a generic dump of 60 responses over three
steps with top-8 lists on both sides, read into an Accumulator that folds every section."""

import matplotlib
import pytest

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.build import diagnosis
from tailtheory.diagnose.cli import DEFAULT_RHOS, HEAD_P, TAIL_P
from tailtheory.diagnose.read import expand_dumps, iter_batches, open_dumps
from tailtheory.diagnose.sections import SECTIONS

from ..conftest import logit_tokens, write_jsonl

DELTA_MAX, DELTA_AVG = 0.05, 0.01


@pytest.fixture(scope="package")
def run(tmp_path_factory):
    """``(acc, d, records)``: the finished sums, the diagnosis and the records written."""
    recs, *_ = logit_tokens(B=60, T=12, V=32, k=8)
    path = write_jsonl(tmp_path_factory.mktemp("sections") / "d.jsonl", recs)
    files = expand_dumps([path])
    opened = open_dumps(files)
    acc = Accumulator(files, TAIL_P, HEAD_P, DEFAULT_RHOS, DELTA_MAX,
                      kinds=[d.kind for d in opened], sections=SECTIONS)
    for i, dump in enumerate(opened):
        for b in iter_batches(dump, i, batch_rows=100):
            acc.add(b)
    return acc, diagnosis(acc, DELTA_MAX, DELTA_AVG, register=[]), recs


def drawn(section, d):
    """The data ``section``'s figure draws (the figure closed)."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, data = section.figure(d, plt)
    plt.close(fig)
    return data
