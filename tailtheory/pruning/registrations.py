"""Everything ``tailtheory.pruning`` registers, in one place: importing this module imports each
module of the section that registers a claim, a method, a study or a stored measurement (each
registers its own on import), in the order the registries list them; :mod:`tailtheory.catalog`
imports this module. ``tests/pruning/test_registrations.py`` checks that every registering module
is here and nothing else is.
"""

from __future__ import annotations

from tailtheory.pruning import claims as _claims  # noqa: F401
from tailtheory.pruning import methods as _methods  # noqa: F401
from tailtheory.pruning import training as _training  # noqa: F401
from tailtheory.pruning import matched_tails as _matched_tails  # noqa: F401
from tailtheory.pruning import trained_tails as _trained_tails  # noqa: F401
