"""tailtheory.probe.run: the configuration, the output folder's rules, and the notebooks' cell."""

import json

import pytest

from tailtheory.probe import run as pr


def test_config_checks_every_field():
    assert pr.ProbeConfig("gradient", "m").batch == 8
    for kw, msg in ((dict(family="x"), "unknown probe"), (dict(device="gpu"), "unknown device"),
                    (dict(batch=0), "--batch"), (dict(length=1), "--length"),
                    (dict(seed=-1), "--seed"), (dict(batch=2.0), "--batch")):
        with pytest.raises(ValueError, match=msg):
            pr.ProbeConfig(**{"family": "mismatch", "model": "m", **kw})


def test_out_files_name_the_notebooks_figures():
    assert pr.out_files("mismatch") == ["token_tail_mismatch_vs_p.png",
                                        "token_tail_mismatch_vs_p.csv", "mismatch_summary.csv",
                                        "probe_mismatch.json"]
    assert "lopti_figure1.png" in pr.out_files("gradient")
    assert "p4_mass_shares.csv" in pr.out_files("pruning")


def test_check_out_dir_trusts_only_its_record(tmp_path):
    """A file of a probe's name is replaced only when the family's record holds its SHA-256;
    a record without the probe's software field vouches for nothing."""
    out = tmp_path / "out"
    assert pr.check_out_dir(out, "mismatch") == out and not out.exists()
    out.mkdir()
    (out / "mismatch_summary.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="mismatch_summary.csv exists"):
        pr.check_out_dir(out, "mismatch")
    rec = {"software": pr.SOFTWARE,
           "files": {"mismatch_summary.csv": pr._sha(out / "mismatch_summary.csv")}}
    (out / "probe_mismatch.json").write_text(json.dumps(rec))
    pr.check_out_dir(out, "mismatch")
    pr.check_out_dir(out, "gradient")                  # another family's files: none there
    (out / "mismatch_summary.csv").write_text("a,b\n1,3\n")      # changed since: not ours
    with pytest.raises(ValueError, match="mismatch_summary.csv"):
        pr.check_out_dir(out, "mismatch")
    (out / "mismatch_summary.csv").unlink()
    (out / "probe_mismatch.json").write_text(json.dumps({**rec, "software": "other"}))
    with pytest.raises(ValueError, match="probe_mismatch.json"):
        pr.check_out_dir(out, "mismatch")


def test_show_probe_shows_the_checkpoints_figures(user_ckpt, tmp_path, monkeypatch):
    """The notebooks' cell: run at the preset's size, every figure saved as probe_<name>."""
    monkeypatch.setattr(pr, "NOTEBOOK_SIZES", {"quick": (2, 16)})
    monkeypatch.setenv("TAILTHEORY_FIGURES", str(tmp_path))
    summary = pr.show_probe("pruning", str(user_ckpt), "cpu", "quick")
    assert summary.rho.iloc[0] == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "probe_p4_mass_shares.png", "probe_token_tail_pruning_tradeoff.png"]
