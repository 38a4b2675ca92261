"""The input formats of ``tailtheory diagnose``: one module per format, listed once below.

Each module defines its ``READER`` (:class:`~tailtheory.diagnose.formats.registry.Reader`:
name, suffixes, where its files sit, sniff, check, rows). :data:`TABLE` registers them in this
order, which is the order of ``--format``'s choices and of the listing
(``tailtheory diagnose --format list``); format detection and folder expansion ask them in this
order too, the generic fallback last. Everything else iterates the table
(:func:`~tailtheory.diagnose.formats.registry.readers`); no other module names a format.

Adding a framework: one file here defining ``READER``, and one line in :data:`TABLE`.

Modules, one line each:

- ``registry``: the ``Reader`` record and the table: register, look up, list, search order.
- ``base``: what every reader shares: the opened ``Dump``, a ``Batch`` of token rows, tables.
- ``records``: what the frameworks' own readers share: per-sample records into the generic names.
- ``generic``: the generic format, the one every other format is read into.
- ``engine``: this engine's dumps (``tailtheory train --dump-tokens``).
- ``nemo_rl``: NeMo-RL's training-data logs.
- ``prime_rl``: prime-rl's token exports.
- ``slime``: slime / Miles' ``--dump-details`` files.
"""

from tailtheory.diagnose.formats import engine, generic, nemo_rl, prime_rl, slime
from tailtheory.diagnose.formats.registry import (Reader, get_reader, reader_names, readers,
                                                  register_reader, search_order,
                                                  unregister_reader)

TABLE = (
    generic.READER,
    engine.READER,
    nemo_rl.READER,
    prime_rl.READER,
    slime.READER,
)
"""The built-in readers, in table order."""

for _reader in TABLE:
    register_reader(_reader)

__all__ = ["TABLE", "Reader", "get_reader", "reader_names", "readers", "register_reader",
           "search_order", "unregister_reader"]
