"""The table of input formats of ``tailtheory diagnose``: one :class:`Reader` per format.

A reader says everything the command needs of its format: its name (the ``--format`` value),
the file suffixes it reads, where its files sit in a folder (:attr:`Reader.patterns`,
:attr:`Reader.find`), whether a file looks like it (:attr:`Reader.sniff`), the checks of a file
before it is read (:attr:`Reader.check`) and its token rows in the generic names
(:attr:`Reader.rows`). Detection, folder expansion, ``--format``'s choices, the listing of
formats and the errors that name them all iterate this table (:func:`readers`), in the order
readers were registered; :mod:`tailtheory.diagnose.formats` registers the built-in ones.

Adding a format: one module under ``tailtheory/diagnose/formats/`` that defines its ``READER``,
and one line in the table of ``tailtheory/diagnose/formats/__init__.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

AUTO = "auto"
"""The ``--format`` value that detects each file's format; no reader may take this name."""


@dataclass(frozen=True)
class Reader:
    """One input format.

    - ``name``: the ``--format`` value; ``about``: one line on what writes it (the listing).
    - ``suffixes``: the file suffixes it reads (lower case, with the dot).
    - ``patterns``: where its files sit in a folder, as globs (the first is named in errors and
      docs); ``find(folder)``: its files there, in reading order (``[]``: none).
    - ``sniff(path)``: whether a file with one of its suffixes looks like this format (from its
      name and first record); readers are asked in table order, the ``fallback`` reader last.
    - ``check(path)``: the file checked before it is read, as a
      :class:`~tailtheory.diagnose.formats.base.Dump`; ``ValueError`` naming the file and what
      it lacks otherwise.
    - ``rows(dump, file, batch_rows)``: its token rows in the generic names, as
      :class:`~tailtheory.diagnose.formats.base.Batch` es of about ``batch_rows`` rows.
    - ``required``: the columns (or keys) it needs, named in errors.
    - ``tabular``: a table of named columns (parquet / JSON lines) told apart from the other
      tabular formats by those columns alone, so a file detected as one may be another format's
      file that lacks its keys; ``--format`` naming another format then checks the file as that.
    - ``fallback``: read when no other reader claims a file (one reader, the generic format).
    - ``shown``: how its files hold a generic log-prob column, where that differs (errors).
    - ``ratio``: the file's column (or key) holding the framework's own logged importance ratio,
      read as the generic ``logged_ratio``; ``""``: the format logs none.
    """

    name: str
    about: str
    suffixes: tuple[str, ...]
    patterns: tuple[str, ...]
    find: Callable[[Path], list]
    sniff: Callable[[Path], bool]
    check: Callable[[Path], object]
    rows: Callable[..., Iterator]
    required: tuple[str, ...] = ()
    tabular: bool = False
    fallback: bool = False
    shown: dict = field(default_factory=dict)
    ratio: str = ""


_READERS: dict[str, Reader] = {}


def register_reader(reader: Reader) -> Reader:
    """Add ``reader`` to the end of the table and return it. Raises ``ValueError`` when its name
    is taken (or is ``auto``), or when it is a second fallback reader."""
    if reader.name == AUTO or reader.name in _READERS:
        raise ValueError(f"a format named {reader.name!r} is registered already "
                         f"({', '.join((AUTO,) + reader_names())})")
    if reader.fallback and any(r.fallback for r in _READERS.values()):
        raise ValueError(f"format {reader.name!r}: the table has its fallback reader already")
    _READERS[reader.name] = reader
    return reader


def unregister_reader(name: str) -> Reader:
    """Remove the reader ``name`` from the table and return it (``ValueError`` if unknown)."""
    reader = get_reader(name)
    del _READERS[name]
    return reader


def get_reader(name: str) -> Reader:
    """The reader of format ``name``; ``ValueError`` listing the valid names if there is none."""
    try:
        return _READERS[name]
    except KeyError:
        raise ValueError(f"unknown format {name!r} (expected one of "
                         f"{', '.join(reader_names())})") from None


def readers() -> tuple[Reader, ...]:
    """Every reader, in table order."""
    return tuple(_READERS.values())


def reader_names() -> tuple[str, ...]:
    """The names of the readers, in table order."""
    return tuple(_READERS)


def search_order() -> tuple[Reader, ...]:
    """The readers in the order they claim a file or a folder: table order, the fallback
    reader last."""
    return tuple(sorted(readers(), key=lambda r: r.fallback))
