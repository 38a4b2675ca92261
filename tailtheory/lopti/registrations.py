"""Everything ``tailtheory.lopti`` registers, in one place: importing this module imports each
module of the section that registers a claim, a method, a study or a stored measurement (each
registers its own on import), in the order the registries list them; :mod:`tailtheory.catalog`
imports this module. ``tests/lopti/test_registrations.py`` checks that every registering module
is here and nothing else is.
"""

from __future__ import annotations

from tailtheory.lopti import claims as _claims  # noqa: F401
from tailtheory.lopti import methods as _methods  # noqa: F401
from tailtheory.lopti import training as _training  # noqa: F401
from tailtheory.lopti import measurement as _measurement  # noqa: F401
from tailtheory.lopti import learn_probes as _learn_probes  # noqa: F401
from tailtheory.lopti import moved as _moved  # noqa: F401
from tailtheory.lopti.decisive import calibration as _calibration  # noqa: F401
from tailtheory.lopti.decisive import frontier as _frontier  # noqa: F401
from tailtheory.lopti.decisive import designs as _designs  # noqa: F401
from tailtheory.lopti.decisive import gate as _gate  # noqa: F401
from tailtheory.lopti.decisive import store as _store  # noqa: F401
