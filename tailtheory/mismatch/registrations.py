"""Everything ``tailtheory.mismatch`` registers, in one place: importing this module imports each
module of the section that registers a claim, a method, a study or a stored measurement (each
registers its own on import), in the order the registries list them; :mod:`tailtheory.catalog`
imports this module. ``tests/mismatch/test_registrations.py`` checks that every registering module
is here and nothing else is.
"""

from __future__ import annotations

from tailtheory.mismatch import claims as _claims  # noqa: F401
