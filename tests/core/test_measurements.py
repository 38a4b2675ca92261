"""Stored measurements (``tailtheory/core/measurements.py``): round trip, stale configs refused."""

from __future__ import annotations

import json

import pytest

from tailtheory.core import measurements as ms


@pytest.fixture(autouse=True)
def results(tmp_path, monkeypatch):
    monkeypatch.setenv(ms.RESULTS_ENV, str(tmp_path))
    return tmp_path


def test_thorough_measures_and_stores_quick_reads_back(results):
    calls = []

    def measure():
        calls.append(1)
        return {"x": [1.0, 2.5]}

    cfg = {"seeds": [0, 1], "lr": 2e-4}
    assert ms.measured("demo", cfg, measure, "thorough", "make it") == {"x": [1.0, 2.5]}
    assert ms.measured("demo", dict(reversed(cfg.items())), measure, "quick", "make it") == \
        {"x": [1.0, 2.5]}
    assert calls == [1]           # quick never re-measures
    record = json.loads((results / "demo.json").read_text())
    assert record["config"] == cfg and record["command"] == "make it"


def test_stale_missing_and_broken_measurements_are_refused(results):
    ms.save_measurement("demo", {"lr": 1}, {"x": 1}, "python regenerate.py")
    with pytest.raises(ms.StaleMeasurement, match="python regenerate.py"):
        ms.load_measurement("demo", {"lr": 2})
    with pytest.raises(ms.StaleMeasurement, match="no stored measurement"):
        ms.measured("other", {}, lambda: {}, "quick", "c")
    (results / "bad.json").write_text("{not json")
    with pytest.raises(ms.StaleMeasurement, match="not a stored measurement"):
        ms.load_measurement("bad", {})


def test_bad_names_and_profiles():
    with pytest.raises(ValueError, match="measurement name"):
        ms.save_measurement("../x", {}, {}, "c")
    with pytest.raises(ValueError, match="profile must be one of"):
        ms.measured("demo", {}, lambda: {}, "medium", "c")
    assert ms.fingerprint({"a": 1, "b": 2}) == ms.fingerprint({"b": 2, "a": 1})
    assert ms.fingerprint({"a": 1}) != ms.fingerprint({"a": 2})


def _hold_lock(name):
    """Another writer holding the store's lock: the open descriptor (close it to release)."""
    import fcntl
    import os

    fd = os.open(ms.store_lock_path(name), os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, b"4242\n", 0)
    return fd


def test_a_write_waits_for_the_lock_and_a_stuck_holder_is_one_line(results, monkeypatch):
    import os
    import threading

    ms.save_measurement("locked", {"k": 1}, {"v": 1}, "cmd")
    assert ms.store_lock_path("locked") == results / ".locked.lock"
    fd = _hold_lock("locked")
    writer = threading.Thread(target=ms.save_measurement, args=("locked", {"k": 2}, {"v": 2}, "cmd"))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive()                                  # waits while the lock is held
    assert json.loads((results / "locked.json").read_text())["data"] == {"v": 1}
    os.close(fd)
    writer.join(10)
    assert json.loads((results / "locked.json").read_text())["data"] == {"v": 2}
    monkeypatch.setattr(ms, "STORE_LOCK_WAIT_S", 0.1)
    fd = _hold_lock("locked")
    try:
        with pytest.raises(ms.StoreError, match=r"locked by another writer \(pid 4242\)") as got:
            ms.save_measurement("locked", {"k": 3}, {"v": 3}, "cmd")
        assert "\n" not in str(got.value)
    finally:
        os.close(fd)


def test_update_builds_from_the_file_as_it_is_under_the_lock(results):
    ms.save_measurement("merge", {"k": 1}, {"rows": [1]}, "cmd")

    def build():
        old = json.loads((results / "merge.json").read_text())["data"]["rows"]
        return {"k": 1}, {"rows": [*old, 2]}

    ms.update_measurement("merge", build, "cmd")
    assert ms.load_measurement("merge", {"k": 1}) == {"rows": [1, 2]}


def test_a_full_disk_is_one_line_and_leaves_the_stored_file(results, monkeypatch):
    import errno
    import os

    path = ms.save_measurement("full", {"k": 1}, {"v": 1}, "cmd")
    before = path.read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(ms.StoreError, match="No space left on device; the stored file is "
                                            "unchanged") as got:
        ms.save_measurement("full", {"k": 2}, {"v": 2}, "cmd")
    assert "\n" not in str(got.value) and isinstance(got.value, ValueError)  # the CLI's one line
    assert path.read_bytes() == before
    assert [p.name for p in results.iterdir() if p.name.endswith(".tmp")] == []


def test_leftovers_of_a_killed_write_are_removed_under_the_lock(results):
    ms.save_measurement("left", {"k": 1}, {"v": 1}, "cmd")
    (results / ".left.json.abc123.tmp").write_text('{"half": ')
    (results / ".other.json.abc123.tmp").write_text("another file's write")
    ms.save_measurement("left", {"k": 1}, {"v": 2}, "cmd")
    assert not (results / ".left.json.abc123.tmp").exists()
    assert (results / ".other.json.abc123.tmp").exists()


@pytest.mark.parametrize("text", ["{not json", '{"data": [1, 2]}', '{"name": "x"}'])
def test_stored_data_is_strict_an_unreadable_file_is_an_error_never_empty(results, text):
    """Missing: ``{}``. Unreadable (or data not a dict): a StoreError naming the file, which is
    left as it is; the ladder's and the gate's readers are this one."""
    from tailtheory.ladder import mismatch
    from tailtheory.lopti.decisive import gate

    assert ms.stored_data("nothing_here") == {}
    path = ms.measurement_path("broken")
    path.write_text(text)
    for read in (ms.stored_data, mismatch.stored_data, gate.stored_data):
        with pytest.raises(ms.StoreError, match="broken.json"):
            read("broken")
    assert path.read_text() == text
    ms.save_measurement("fine", {"a": 1}, {"k": [1]}, "cmd")
    assert ms.stored_data("fine") == {"k": [1]}
