"""Two studies on one store, killed at random points (``make test-thorough``): every finished run
is stored once, no stored row is ever lost or duplicated, and the store parses at every moment.

Each study process (``chaos_driver.py``) trains one arm's seeds into its own run cache and stores
after each run into the shared ``results/chaos.json``; each store write is slowed inside the
store's lock so that the two processes' writes overlap. The test SIGKILLs each process once while
it trains and once during a store write (holding the lock, its temporary file written), restarts
it, and reads the store every few milliseconds meanwhile. With the store's lock taken away
(``CHAOS_NO_LOCK=1``) rows are lost: :func:`test_without_the_lock_rows_are_lost` shows that the
test sees it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("chaos_driver.py")
LABELS = ("GRPO", "AR")
SEEDS = [0, 1, 2]
DEADLINE_S = 480


def _start(label: str, tmp: Path, no_lock: bool) -> subprocess.Popen:
    env = dict(os.environ, TAILTHEORY_RESULTS=str(tmp / "results"),
               TAILTHEORY_CACHE=str(tmp / f"cache_{label}"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               CHAOS_NO_LOCK="1" if no_lock else "0")
    log = open(tmp / f"{label}.log", "a")
    return subprocess.Popen([sys.executable, str(DRIVER), label, str(tmp / "state")], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def _stored(path: Path) -> set[tuple[str, int]] | None:
    """(label, seed) of every row of the store (None when there is none yet); a file that does not
    parse, or a row stored twice, fails the test."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())  # atomic replaces: it always parses
    rows = [(label, r["seed"]) for label, rs in record["data"].items() for r in rs]
    assert len(rows) == len(set(rows)), f"a row stored twice: {sorted(rows)}"
    for label, rs in record["data"].items():
        assert len(record["config"][label]) == len(rs), "rows and identities differ in number"
    return set(rows)


def _chaos(tmp: Path, no_lock: bool = False, seed: int = 0) -> dict:
    """Run both processes to the end under the kills; what the monitor saw."""
    rng = random.Random(seed)
    (tmp / "state").mkdir()
    store = tmp / "results" / "chaos.json"
    plans = {label: rng.sample(["train", "write"], 2) for label in LABELS}
    procs = {label: _start(label, tmp, no_lock) for label in LABELS}
    seen: set = set()
    lost: list = []
    kills: list = []
    armed: dict = {}
    start = time.monotonic()
    try:
        while procs and time.monotonic() - start < DEADLINE_S:
            now = _stored(store)
            if now is not None:
                if seen - now:
                    lost.append(sorted(seen - now))
                seen |= now
            for label, proc in list(procs.items()):
                marks = {k: tmp / "state" / f"{label}.{k}" for k in ("training", "writing")}
                if proc.poll() is not None:
                    if proc.returncode == 0:
                        del procs[label]
                        continue
                    assert proc.returncode == -signal.SIGKILL, (
                        f"{label} failed: {(tmp / f'{label}.log').read_text()[-3000:]}")
                    for m in marks.values():
                        m.unlink(missing_ok=True)
                    procs[label] = _start(label, tmp, no_lock)
                    continue
                if not plans[label]:
                    continue
                kind = plans[label][0]
                mark = marks["training" if kind == "train" else "writing"]
                if not mark.exists():
                    armed.pop(label, None)
                    continue
                when = armed.setdefault(label, time.monotonic() + rng.uniform(0.0, 0.3))
                if time.monotonic() >= when:
                    proc.send_signal(signal.SIGKILL)
                    kills.append((label, kind))
                    plans[label].pop(0)
                    armed.pop(label, None)
            time.sleep(0.005)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert not procs, f"the studies did not finish within {DEADLINE_S} s"
    return {"lost": lost, "kills": kills, "final": _stored(store),
            "leftovers": sorted(p.name for p in (tmp / "results").glob(".*.tmp"))}


@pytest.mark.slow
def test_two_studies_on_one_store_survive_kills(tmp_path):
    got = _chaos(tmp_path)
    assert sorted(k for _, k in got["kills"]) == ["train", "train", "write", "write"]
    assert got["lost"] == [], f"stored rows disappeared: {got['lost']}"
    assert got["final"] == {(label, s) for label in LABELS for s in SEEDS}
    assert got["leftovers"] == [], "a killed write's temporary file was left behind"


@pytest.mark.slow
def test_without_the_lock_rows_are_lost(tmp_path):
    """The chaos test's control: the same processes without the store's lock lose rows (a write
    made from a file read before the other process's write replaces it)."""
    got = _chaos(tmp_path, no_lock=True, seed=1)
    assert got["lost"], "no row was lost without the lock: the chaos test would not see a race"
