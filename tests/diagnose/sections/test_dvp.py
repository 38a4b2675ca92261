"""DVP's pruning (``tailtheory.diagnose.sections.dvp``): the lists' lengths and the pruned mass it
folds, its table per rho and figure; a dump without lists says what it needs."""

import numpy as np

from tailtheory.diagnose.cli import diagnose_dumps
from tailtheory.diagnose.sections.dvp import SECTION

from ..conftest import write_jsonl
from .conftest import drawn


def test_dvp_folds_the_lists(run, tmp_path):
    acc, d, recs = run
    sums = acc.folds["dvp"]
    assert sums.side == "rollout" and sums.topk_len == [8, 8]
    assert (sums.dvp["n"] == len(recs)).all() and d.summary["topk_k"] == [8, 8]
    assert list(d.tables["dvp"].rho) == list(acc.rhos)
    assert np.all(np.diff(d.tables["dvp"].pruned_token_frac) >= 0)       # more pruned at larger rho
    assert drawn(SECTION, d) is d.tables["dvp"]
    plain = [{k: v for k, v in r.items() if not k.startswith("topk")} for r in recs]
    bare = diagnose_dumps([write_jsonl(tmp_path / "bare.jsonl", plain)], register=[])
    assert "dvp" not in bare.tables and bare.verdicts["dvp"][0].startswith("needs the top-k")
