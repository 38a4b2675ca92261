"""Every stored measurement by name: what made ``results/<name>.json``, what it costs to make again,
and whether the code still asks for it.

A stored measurement (:mod:`tailtheory.core.measurements`) is made one of two ways:

- a **study** (:mod:`tailtheory.experiments.study`): training runs stored run by run,
  ``tailtheory study NAME``;
- a **measurement** (:class:`Measure`, registered here): a function that measures again and
  stores, ``tailtheory measure NAME``.

A :class:`Measure` also records what is kept but never made again: a **superseded** store under
``results/superseded/`` (the no-learning regime's runs: recorded once, replaced by a study) and a
**record** (rows written once, e.g. exploratory runs each carrying its own command).

A measurement tells its cost before it starts (:attr:`Measure.cost`, from its module's docstring
or the seconds its rows recorded; "not recorded" where nothing was) and what a stopped run leaves
(:data:`RESUME`): most are stored once, at the end, and start over; the ladder's build and
effects store each part and skip what is stored; its per-rung measurements store each rung but
measure every rung again. A study always continues (its run cache, its rows stored run by run).

Each section registers its stores in the module that measures them (:func:`register_measure`);
this module imports none of them: the lookups below load the package's catalog
(:func:`tailtheory.core.registry.load_catalog`) first, as the study and method registries do.

What ``tailtheory measure`` reads of a store (:func:`listing`, :func:`staleness`):

- **rows** (:func:`row_count`): of its ``data``, every dict held in a top-level list (an arm's
  seeds, a probe's batches, calibration tokens), plus one per top-level dict value (a policy, a
  rung, a setting); a ``data`` of numbers only is one row;
- **models** (:func:`models`): the distinct weights fingerprints its rows record, in any of the
  conventions the stores use (a study's ``provenance``, a measured row's ``weights``, a ladder
  build's ``warm_weights`` and ``corpus_weights``), ``unrecorded`` when none;
- **machines** (:func:`machines`): the distinct machines its rows name (``machine``, ``cpu``,
  a run's ``provenance``), ``unrecorded`` when none;
- **stale**: the stored ``fingerprint`` differs from :func:`~tailtheory.core.measurements.fingerprint`
  of today's config (for a study: of today's identities of the runs it stores).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from tailtheory.core.measurements import fingerprint, measurement_path, results_dir
from tailtheory.core.provenance import machines, models
from tailtheory.core.registry import load_catalog
from tailtheory.experiments.incremental import study_identities
from tailtheory.experiments.study import Study, studies

Config = Callable[[], dict]
"""``config()``: today's config of a store, what the code asks it to be keyed by (its
``fingerprint`` is compared with the stored one)."""

Remake = Callable[[], object]
"""``remake()``: measure again and store ``results/<name>.json`` (the section's own measuring
path, e.g. ``decisive_data("thorough", recipe)``), showing its progress bars (tqdm) where it has
them; the return value is not used."""

SUPERSEDED = "superseded"
"""The folder of ``results/`` that holds the superseded stores."""

RESUME = {"no": "starts over if stopped: stored once, at the end (the warm starts and "
                 "policies it reads stay cached)",
          "parts": "each part (a rung) is stored as it finishes, but a new run measures every "
                   "part again",
          "yes": "resumes: each part is stored as it finishes, and a new run skips what is "
                 "stored"}
"""How a stopped remake continues, by :attr:`Measure.resume`."""

RESERVED = ("list", "stale")
"""Words of ``tailtheory measure`` that no store may be named."""


def measure_command(name: str) -> str:
    """``tailtheory measure NAME``: the command a registered measurement is made with (what its
    store records as ``command``)."""
    return f"tailtheory measure {name}"


@dataclass(frozen=True)
class Measure:
    """A stored measurement that is not a study: how it is made again, or why it is not."""

    name: str
    """The store's file stem: ``results/<name>.json`` (``results/superseded/`` when
    :attr:`superseded`)."""
    summary: str
    """One line: what it measures, for which claims."""
    cost: str = "-"
    """What making it again costs, told before it starts (e.g. ``"about 10 CPU minutes"``)."""
    config: Config | None = None
    """Today's config (:data:`Config`); None for a store nothing asks for any more."""
    remake: Remake | None = None
    """Measures again and stores (:data:`Remake`); None: recorded once, never made again."""
    resume: str = "no"
    """What a stopped :attr:`remake` leaves and a new one does with it: a key of
    :data:`RESUME`."""
    superseded: str = ""
    """What replaced a superseded store (``"study lopti_learn"``); it then lies in
    ``results/superseded/`` and is never made again."""

    def __post_init__(self):
        measurement_path(self.name)                       # letters, digits, '_', '-'
        if self.name in RESERVED:
            raise ValueError(f"{self.name!r} is a word of `tailtheory measure`, not a name")
        if (self.config is None) != (self.remake is None):
            raise ValueError(f"{self.name}: a remade store needs both config and remake")
        if self.superseded and self.remake is not None:
            raise ValueError(f"{self.name}: a superseded store is never made again")
        if self.resume not in RESUME:
            raise ValueError(f"{self.name}: resume must be one of {', '.join(RESUME)}")

    @property
    def kind(self) -> str:
        """``superseded``, ``record`` (recorded once) or ``measurement``."""
        return SUPERSEDED if self.superseded else "record" if self.remake is None else \
            "measurement"

    @property
    def command(self) -> str:
        """:func:`measure_command`: what makes it again, or (a superseded store, a record) says
        why nothing does and what replaced it."""
        return measure_command(self.name)

    @property
    def path(self) -> Path:
        """Where it is stored."""
        folder = results_dir() / SUPERSEDED if self.superseded else results_dir()
        return folder / f"{self.name}.json"

    def plan(self) -> str:
        """What :attr:`remake` will do and what it costs (printed before it starts)."""
        where = self.path
        if self.remake is None:
            why = (f"superseded by {self.superseded}" if self.superseded else
                   "recorded once")
            return f"{self.name}: {self.summary}\nnot made again: {why} ({where})"
        how = RESUME[self.resume]
        return (f"{self.name}: {self.summary}\ncost: {self.cost}\nwill: measure again and "
                f"store {where}; {how}")


_MEASURES: dict[str, Measure] = {}


def register_measure(m: Measure) -> Measure:
    """Register ``m`` under its name (a name registered already is a ``ValueError``; a study's
    name, too, once the catalog is loaded: :func:`measures`). Returns ``m``."""
    if m.name in _MEASURES:
        raise ValueError(f"stored measurement {m.name!r} is already registered")
    _MEASURES[m.name] = m
    return m


def measures() -> Mapping[str, Measure]:
    """Every registered :class:`Measure` by name, the package's catalog loaded first; a name
    registered both here and as a study is a ``ValueError`` (one store, one way to make it)."""
    load_catalog()
    both = sorted(set(_MEASURES) & set(studies()))
    if both:
        raise ValueError(f"registered both as a measurement and as a study: {', '.join(both)}")
    return MappingProxyType(_MEASURES)


def get(name: str) -> Measure | Study:
    """The registered measurement or study ``name``; an unknown name is a ``ValueError``
    listing the valid ones."""
    found = {**studies(), **measures()}
    if name not in found:
        raise ValueError(f"unknown stored measurement {name!r}; valid: "
                         f"{', '.join(sorted(found))}")
    return found[name]


# ---- reading the stores ----------------------------------------------------------------------

def row_count(data) -> int:
    """Rows of a store's ``data`` (module docstring): dicts in top-level lists, one per
    top-level dict value; a ``data`` of numbers only is one row."""
    if isinstance(data, list):
        return sum(isinstance(r, dict) for r in data) or len(data)
    if not isinstance(data, dict):
        return 1
    nested = [v for v in data.values() if isinstance(v, (list, dict))]
    if not nested:
        return 1
    return sum(sum(isinstance(r, dict) for r in v) if isinstance(v, list) else 1 for v in nested)


def _stored_files() -> dict[tuple[str, bool], Path]:
    """``(name, superseded) -> path`` of every JSON file in ``results/`` and
    ``results/superseded/``."""
    out = {}
    for sup, folder in ((False, results_dir()), (True, results_dir() / SUPERSEDED)):
        for p in sorted(folder.glob("*.json")):
            out[(p.stem, sup)] = p
    return out


def listing() -> list[dict]:
    """One row per stored file (and per registered store not stored here): ``name``, ``kind``
    (``study``, ``measurement``, ``record``, ``superseded`` or ``unregistered``), ``command``,
    ``rows`` (:func:`row_count`; ``-`` without ``data``, ``missing`` with no file, ``unreadable``),
    ``models`` (:func:`models`) and ``machines`` (:func:`machines`), each joined by ``", "`` or
    ``unrecorded``."""
    known: dict[str, Measure | Study] = {**studies(), **measures()}
    files = _stored_files()
    out = []
    for (name, sup), path in files.items():
        entry = known.get(name)
        is_sup = isinstance(entry, Measure) and bool(entry.superseded)
        if entry is None or is_sup != sup:
            out.append(_row(name, "unregistered", "-", path))
        elif isinstance(entry, Study):
            out.append(_row(name, "study", entry.command, path))
        else:
            out.append(_row(name, entry.kind, entry.command, path))
    for name, entry in sorted(known.items()):
        sup = isinstance(entry, Measure) and bool(entry.superseded)
        if (name, sup) not in files:
            kind = "study" if isinstance(entry, Study) else entry.kind
            out.append({"name": name, "kind": kind, "command": entry.command, "rows": "missing",
                        "models": "-", "machines": "-"})
    return sorted(out, key=lambda r: (r["kind"] == SUPERSEDED, r["name"]))


def _row(name: str, kind: str, command: str, path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"name": name, "kind": kind, "command": command, "rows": "unreadable",
                "models": "-", "machines": "-"}
    data = record.get("data") if isinstance(record, dict) else None
    return {"name": name, "kind": kind, "command": command,
            "rows": "-" if data is None else row_count(data),
            "models": ", ".join(models(data)) or "unrecorded",
            "machines": ", ".join(machines(data)) or "unrecorded"}


COLUMNS = ("name", "kind", "rows", "models", "machines", "command")
"""The columns of :func:`table`, in order."""

SHORT_DIGITS = 8
"""Hex digits of a fingerprint :func:`table` shows (as many as a ladder model's label holds)."""


def _short(models_cell: str) -> str:
    """A ``models`` cell with each 16-digit fingerprint cut to :data:`SHORT_DIGITS`."""
    return ", ".join(fp[:SHORT_DIGITS] if len(fp) == 16 else fp
                     for fp in models_cell.split(", "))


def table(rows: list[dict]) -> str:
    """``rows`` of :func:`listing` as aligned text, one line each (the command last, unpadded;
    fingerprints cut to their first :data:`SHORT_DIGITS` hex digits, the full ones in
    :func:`listing`)."""
    head = {c: c for c in COLUMNS}
    shown = [head, *({**r, "models": _short(str(r["models"]))} for r in rows)]
    width = {c: max(len(str(r[c])) for r in shown) for c in COLUMNS[:-1]}
    return "\n".join("  ".join(f"{str(r[c]):<{width[c]}}" for c in COLUMNS[:-1]) + "  " +
                     str(r["command"]) for r in shown)


def _today(entry: Measure | Study, record: dict) -> str:
    """The fingerprint today's code gives the store of ``record`` (a study: its stored runs'
    identities as today's configs give them)."""
    if isinstance(entry, Measure):
        return fingerprint(entry.config())
    want = study_identities(entry, entry.measure_preset)
    ident = {label: [want.get(label, {}).get(r.get("seed")) for r in rows]
             for label, rows in record["data"].items()}
    return fingerprint(ident)


def staleness() -> list[dict]:
    """Per store the code still asks for (studies and measurements): ``name``, ``state``
    (``current``, ``stale``, ``missing`` or ``unreadable``), ``stored`` and ``today``
    fingerprints, ``command`` and ``detail``."""
    out = []
    entries = {**studies(), **{n: m for n, m in measures().items() if m.config is not None}}
    for name, entry in sorted(entries.items()):
        row = {"name": name, "command": entry.command, "stored": "-", "today": "-", "detail": ""}
        path = measurement_path(name)
        if not path.exists():
            out.append({**row, "state": "missing", "detail": f"no {path}"})
            continue
        try:
            record = json.loads(path.read_text())
            stored = record["fingerprint"]
            today = _today(entry, record)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            out.append({**row, "state": "unreadable", "detail": f"{path}: {exc}"})
            continue
        out.append({**row, "stored": stored, "today": today,
                    "state": "current" if stored == today else "stale"})
    return out
