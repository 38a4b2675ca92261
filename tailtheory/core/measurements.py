"""Stored measurements: the numbers behind a training-scale verdict, kept in ``results/``.

A training claim (LOPTI's L1-L6, DVP's P4 on trained models and P5) rests on runs that take
tens of minutes: too long for ``make test``. Their checks therefore read, under the ``quick``
profile, the measurement the ``full`` preset last stored, and re-measure under ``thorough``.
A stored measurement is plain JSON (never a pickle: reading it cannot run code) holding the
config that produced it, the command that regenerates it, and the raw numbers; the verdict is
always derived from those numbers by the check, never stored. A measurement whose config differs
from the one the code asks for today is *stale* and refused with the regenerating command, so a
changed experiment can never pass on old numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from tailtheory.core.io import REPO_ROOT, atomic_write_json

PROFILES = ("quick", "thorough")
"""``quick`` reads a stored measurement; ``thorough`` measures again and stores the numbers."""

RESULTS_ENV = "TAILTHEORY_RESULTS"
"""Environment variable that moves the stored measurements (tests use a temporary folder)."""


_RECORDERS: list[list[tuple[str, str]]] = []


@contextmanager
def recording() -> Iterator[list[tuple[str, str]]]:
    """Collect ``(name, command)`` of every measurement loaded or stored inside the block: what a
    verdict read, and the command that regenerates it (:func:`~tailtheory.core.registry.run_claim`
    keeps them with the result)."""
    got: list[tuple[str, str]] = []
    _RECORDERS.append(got)
    try:
        yield got
    finally:
        del _RECORDERS[next(i for i, g in enumerate(_RECORDERS) if g is got)]


def _record(name: str, command: str) -> None:
    for got in _RECORDERS:
        if (name, command) not in got:
            got.append((name, command))


class StaleMeasurement(ValueError):
    """No stored measurement for this config (missing, or made by a different config)."""


def results_dir() -> Path:
    """``$TAILTHEORY_RESULTS``, else ``results/`` of the checkout."""
    return Path(os.environ.get(RESULTS_ENV, REPO_ROOT / "results"))


def fingerprint(config: dict) -> str:
    """16 hex digits of SHA-256 over ``config`` as sorted JSON (the identity of an experiment)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _path(name: str) -> Path:
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"measurement name must be letters, digits, '_' or '-', got {name!r}")
    return results_dir() / f"{name}.json"


def save_measurement(name: str, config: dict, data: dict, command: str) -> Path:
    """Store ``data`` measured under ``config`` as ``results/<name>.json`` (atomic)."""
    return atomic_write_json(_path(name), {"name": name, "fingerprint": fingerprint(config),
                                           "command": command, "config": config, "data": data})


def load_measurement(name: str, config: dict) -> dict:
    """The stored ``data`` of ``name`` if it was measured under ``config``; else
    :class:`StaleMeasurement` saying which command regenerates it."""
    path = _path(name)
    if not path.exists():
        raise StaleMeasurement(f"no stored measurement {path}; run the full preset to make it "
                               f"(or `tailtheory verify --profile thorough`)")
    try:
        record = json.loads(path.read_text())
        stored, data, command = record["fingerprint"], record["data"], record["command"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise StaleMeasurement(f"{path} is not a stored measurement ({exc})") from exc
    if stored != fingerprint(config):
        raise StaleMeasurement(f"{path} was measured under another config (fingerprint {stored}, "
                               f"today's {fingerprint(config)}); regenerate it with: {command}")
    _record(name, command)
    return data


def measured(name: str, config: dict, measure: Callable[[], dict], profile: str,
             command: str) -> dict:
    """``quick``: the stored measurement of ``config``; ``thorough``: ``measure()``, stored."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    if profile == "quick":
        return load_measurement(name, config)
    data = measure()
    save_measurement(name, config, data, command)
    _record(name, command)
    return data
