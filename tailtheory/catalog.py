"""The catalog: every paper section's claims, methods, studies and stored measurements, collected
in one place.

Discovery goes up, not down. The registries live on the lower floors
(:mod:`tailtheory.core.registry` for claims, :mod:`tailtheory.engine.registry` for methods,
:mod:`tailtheory.experiments.study` for studies, :mod:`tailtheory.experiments.measures` for the
other stored measurements) and name no section; this module, above the sections, imports each
section's ``registrations`` module (each section lists its registering modules there, in one
place), and those register themselves on import. The registries find this module through the
package's entry point group ``tailtheory.catalog`` (:func:`tailtheory.core.registry.load_catalog`), so a lookup from Python
sees every claim, method and study without importing a section by name, and another package
can add its own claims, methods or studies by declaring an entry point in that group.

A new section is its entry in :data:`SECTIONS` and one import line below (its
``registrations``).
"""

from __future__ import annotations

# The engine's own methods and learning curve, then one line per section (and the size axis and
# the regime probe, which register stored measurements), in the order of the claims.
from tailtheory.engine import methods as _engine_methods  # noqa: F401
from tailtheory.experiments import learning as _learning  # noqa: F401
from tailtheory.softmax import registrations as _softmax  # noqa: F401
from tailtheory.mismatch import registrations as _mismatch  # noqa: F401
from tailtheory.pruning import registrations as _pruning  # noqa: F401
from tailtheory.lopti import registrations as _lopti  # noqa: F401
from tailtheory.trm import registrations as _trm  # noqa: F401
from tailtheory.otb import registrations as _otb  # noqa: F401
from tailtheory.tim import registrations as _tim  # noqa: F401
from tailtheory.ladder import registrations as _ladder  # noqa: F401
from tailtheory.regime import measure as _regime_measure  # noqa: F401
from tailtheory.experiments.measures import Measure, register_measure

SECTIONS = ("softmax", "mismatch", "pruning", "lopti", "trm", "otb", "tim")
"""The paper sections, one subpackage each, in the order of the claims (S, M, P, L, T, O, V)."""

VERDICTS = register_measure(Measure(
    "verdicts", "the no-learning regime's verdicts, recorded once and printed beside today's "
    "(tailtheory.core.registry.superseded)", superseded="today's verdicts (tailtheory verify)"))
"""``results/superseded/verdicts.json``: read by the claims registry, which knows no store."""
