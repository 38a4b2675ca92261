"""This engine's dumps (``tailtheory.diagnose.formats.engine``): found in a run directory, told by
their columns, read with ``logp_train = logp_roll + log_rho`` and their own column names."""

import numpy as np
import pytest

from tailtheory.diagnose.formats.engine import ENGINE_REQUIRED, READER, check, find, sniff
from tailtheory.diagnose.read import iter_batches, open_dump

from ..conftest import engine_frame, write_jsonl


def test_engine_run_read(engine_run):
    files = find(engine_run)
    assert files and all(f.parent.name == "tokens" for f in files) and find(engine_run / "tokens")
    assert sniff(files[0]) and READER.tabular and not READER.fallback
    df = engine_frame(engine_run)
    got = [b for i, f in enumerate(files) for b in iter_batches(open_dump(f), i)]
    train = np.concatenate([b.logp_train for b in got])
    np.testing.assert_allclose(train, (df.logp_roll + df.log_rho).to_numpy())
    assert np.concatenate([b.sample_id for b in got]).tolist() == df.seq.tolist()


def test_engine_columns_required(tmp_path):
    f = write_jsonl(tmp_path / "e.jsonl", [dict.fromkeys(ENGINE_REQUIRED[:-1], 0)])
    assert not sniff(f)
    with pytest.raises(ValueError, match="missing column.s. log_rho .*an engine dump step"):
        check(f)
    assert READER.shown["logp_rollout"] == "logp_roll"
