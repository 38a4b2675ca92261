"""The notebooks take a checkpoint: papermill runs notebook 01 with ``-p MODEL PATH -p DEVICE
cpu`` on a user's checkpoint, and its per-model sections show the checkpoint's figures (the
probes of ``tailtheory probe``), saved as ``probe_<name>`` beside the notebook's own. About 25 s
on a 2-core CPU (the quick preset's 20 s, and the probes at 4 x 128 tokens), so it runs under
``make test-thorough``: in ``make test`` the probes on checkpoints are ``test_cli.py``'s and
notebook 01 runs in a real kernel (``tests/test_notebook_outputs.py``)."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_papermill_runs_notebook_01_on_a_checkpoint(user_ckpt, tmp_path):
    out, figures = tmp_path / "01.ipynb", tmp_path / "figures"
    # a batch run, as the guide's command: explorers drawn as static figures (no front end to
    # show a widget); every cell bounded by 2 minutes
    env = dict(os.environ, TAILTHEORY_FIGURES=str(figures), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               TAILTHEORY_WIDGETS="0")
    env.pop("TAILTHEORY_PRESET", None)
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "01_token_tail.ipynb"),
           str(out), "-p", "MODEL", str(user_ckpt), "-p", "DEVICE", "cpu", "--cwd",
           str(ROOT / "notebooks"), "--kernel", "python3", "--execution-timeout", "120"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(out, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    probe_cells = [c for c in code if "show_probe(" in c.source]
    assert len(probe_cells) == 2
    for cell in probe_cells:   # the checkpoint's figures inline, and its summary table
        assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.source
        assert any("text/html" in o.get("data", {}) for o in cell.outputs), cell.source
    names = sorted(p.name for p in figures.glob("probe_*.png"))
    assert names == ["probe_p4_mass_shares.png", "probe_token_tail_mismatch_vs_p.png",
                     "probe_token_tail_pruning_tradeoff.png"]
    assert not (figures / "token_tail_mismatch_vs_p.png").exists()   # the M7 model's: skipped
    assert (figures / "token_tail_score_norm.png").exists()          # the other sections ran
