"""Everything ``tailtheory.ladder`` registers, in one place: importing this module imports each
module of the package that registers a claim, a method, a study or a stored measurement (each
registers its own on import), in the order the registries list them; :mod:`tailtheory.catalog`
imports this module. ``tests/ladder/test_registrations.py`` checks that every registering module
is here and nothing else is.
"""

from __future__ import annotations

from tailtheory.ladder import dose as _dose  # noqa: F401
from tailtheory.ladder import build as _build  # noqa: F401
from tailtheory.ladder import effects as _effects  # noqa: F401
from tailtheory.ladder import mismatch as _mismatch  # noqa: F401
from tailtheory.ladder import probes as _probes  # noqa: F401
from tailtheory.ladder import claims as _claims  # noqa: F401
