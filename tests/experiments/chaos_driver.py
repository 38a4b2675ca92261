"""One study process of the store's chaos test (``test_store_chaos.py``): trains the seeds of one
arm of a small study one at a time into its own run cache and stores after each, as ``tailtheory
study`` does, into the store it shares with the other process.

Run as ``python chaos_driver.py LABEL STATE_DIR``. Test instrumentation, set by the test: each
replace of a ``results/`` file is preceded by :data:`WRITE_SLEEP_S` seconds inside the store's
lock (a slow disk, so that the two processes' writes overlap and a kill can land in one), with
``STATE_DIR/LABEL.writing`` present meanwhile; ``STATE_DIR/LABEL.training`` is present while a
run trains. ``CHAOS_NO_LOCK=1`` takes the store's lock away (to see the test fail without it)
and makes the race it then has certain rather than likely: a write about to replace the store
waits (at most :data:`BARRIER_S`) until the other process is writing too, so both have read the
store before either replaces it; ``GRPO`` then replaces at once and ``AR`` :data:`STAGGER_S`
later, long enough for the test's monitor to see ``GRPO``'s row before ``AR``'s write drops it.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from tailtheory.core import io, measurements
from tailtheory.engine.config import TrainConfig
from tailtheory.experiments.incremental import store_done
from tailtheory.experiments.runs import run_many
from tailtheory.experiments.study import Arm, Study

SEEDS = (0, 1, 2)
LABELS = {"GRPO": "grpo", "AR": "ar"}
WRITE_SLEEP_S = 0.6
BARRIER_S = 10.0
STAGGER_S = 0.3
OTHER = {"GRPO": "AR", "AR": "GRPO"}
BASE = TrainConfig(model="tiny", n_people=2, prompts_per_step=2, group_size=2, lr=3e-3,
                   eval_every=0, device="cpu", steps=12)


def arms(preset):
    """Two arms of three seeds each."""
    return [Arm(label, tuple(replace(BASE, method=m, seed=s) for s in SEEDS), {"method": m})
            for label, m in LABELS.items()]


STUDY = Study("chaos", arms, measure_preset="quick")


def instrument(state: Path, label: str) -> None:
    """Slow each replace of a stored measurement, marking it; optionally remove the lock."""
    results = measurements.results_dir().resolve()
    real_replace = os.replace
    no_lock = os.environ.get("CHAOS_NO_LOCK") == "1"

    def slow_replace(src, dst):
        if Path(dst).resolve().parent == results:
            mark = state / f"{label}.writing"
            mark.touch()
            time.sleep(WRITE_SLEEP_S)
            if no_lock:  # both have read the store before either replaces it
                other, deadline = state / f"{OTHER[label]}.writing", time.monotonic() + BARRIER_S
                while not other.exists() and time.monotonic() < deadline:
                    time.sleep(0.005)
                if label == "AR":
                    time.sleep(STAGGER_S)
            real_replace(src, dst)
            mark.unlink(missing_ok=True)
            return
        real_replace(src, dst)

    io.os.replace = slow_replace  # the os module that atomic writes use
    if no_lock:
        @contextmanager
        def no_lock(name):
            yield measurements.measurement_path(name)

        measurements.store_lock = no_lock


def main(label: str, state: Path) -> int:
    """Train and store every seed of arm ``label``; 0 when all are stored."""
    instrument(state, label)
    arm = next(a for a in STUDY.plan("quick") if a.label == label)
    training = state / f"{label}.training"
    for cfg in arm.configs:
        training.touch()
        run_many([cfg], workers=1, progress=False)
        training.unlink(missing_ok=True)
        store_done(STUDY)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
