"""Atomic writes and figure output."""

import json
import os
import stat

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tailtheory.core.io import (WORKERS_ENV, atomic_write_json, atomic_write_text,  # noqa: E402
                                preset, save_figure, workers)


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    p = tmp_path / "sub" / "a.json"
    atomic_write_json(p, {"x": 1})
    atomic_write_json(p, {"x": 2})
    assert json.loads(p.read_text()) == {"x": 2}
    assert [f.name for f in p.parent.iterdir()] == ["a.json"]
    assert stat.S_IMODE(os.stat(p).st_mode) & 0o044, "files should be readable by others"


def test_crash_during_write_keeps_old_file(tmp_path, monkeypatch):
    """A crash between writing and renaming leaves the old file whole and no temporary behind."""
    p = tmp_path / "a.txt"
    atomic_write_text(p, "old")

    def crash(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(p, "new")
    assert p.read_text() == "old"
    assert [f.name for f in tmp_path.iterdir()] == ["a.txt"]


def test_save_figure_writes_png_and_csv(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = save_figure(fig, "demo", data=pd.DataFrame({"x": [0, 1]}), directory=tmp_path)
    plt.close(fig)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "demo.csv").read_text().startswith("x")


def test_workers_env_override(monkeypatch, capsys):
    """``$TAILTHEORY_WORKERS`` overrides a training notebook's ``WORKERS`` and says so; a bad
    value, from either place, is an error naming its source."""
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    assert workers(2) == 2 and capsys.readouterr().out == ""
    monkeypatch.setenv(WORKERS_ENV, "1")
    assert workers(2) == 1
    assert "WORKERS = 1, from $TAILTHEORY_WORKERS (overrides 2" in capsys.readouterr().out
    for bad in ("0", "two", "-1", "1.5", ""):
        monkeypatch.setenv(WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=r"from \$TAILTHEORY_WORKERS"):
            workers(2)
    monkeypatch.delenv(WORKERS_ENV)
    for bad in (0, True, 1.0, "2"):
        with pytest.raises(ValueError, match="from the parameters cell"):
            workers(bad)


def test_preset_env_override(monkeypatch, capsys):
    monkeypatch.delenv("TAILTHEORY_PRESET", raising=False)
    assert preset("quick") == "quick"
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("TAILTHEORY_PRESET", "full")
    assert preset("quick") == "full"
    out = capsys.readouterr().out
    assert "from $TAILTHEORY_PRESET (overrides 'quick' of the parameters cell)" in out
    assert preset("full") == "full"
    assert "from $TAILTHEORY_PRESET" in capsys.readouterr().out
    monkeypatch.setenv("TAILTHEORY_PRESET", "huge")
    with pytest.raises(ValueError, match="PRESET"):
        preset("quick")


def test_remove_partial_writes_takes_only_atomic_write_leftovers(tmp_path):
    """A write killed between its temporary file and the rename leaves ``.NAME.XXXX.tmp``; those
    go, everything else stays."""
    from tailtheory.core.io import remove_partial_writes

    atomic_write_text(tmp_path / "a.txt", "whole")
    left = [tmp_path / ".a.txt.q1w2.tmp", tmp_path / ".b.json.zz.tmp"]
    for p in left:
        p.write_text("partial")
    (tmp_path / "mine.tmp").write_text("not a leftover")
    assert remove_partial_writes(tmp_path) == sorted(left)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "mine.tmp"]
    assert remove_partial_writes(tmp_path / "absent") == []


def test_figures_dir_in_a_kernel_is_the_ignored_scratch_folder(monkeypatch):
    """JupyterLab runs leave the tracked figures/ alone; $TAILTHEORY_FIGURES still decides."""
    import subprocess

    from tailtheory.core import io

    monkeypatch.delenv(io.FIGURES_ENV, raising=False)
    assert io.figures_dir() == io.REPO_ROOT / "figures"  # a script, `make repro`
    monkeypatch.setattr(io, "in_kernel", lambda: True)
    scratch = io.figures_dir()
    assert scratch == io.REPO_ROOT / "figures" / io.SCRATCH_FIGURES
    if (io.REPO_ROOT / ".git").exists():  # ignored by git
        probe = scratch / "token_tail_mismatch_vs_p.png"
        rc = subprocess.run(["git", "-C", str(io.REPO_ROOT), "check-ignore", "-q", str(probe)])
        assert rc.returncode == 0, f"{scratch} must be ignored by git (.gitignore)"
    monkeypatch.setenv(io.FIGURES_ENV, str(io.REPO_ROOT / "figures"))  # `make repro`, `make render`
    assert io.figures_dir() == io.REPO_ROOT / "figures"
