"""The catalog: every paper section's claims, methods and studies, collected in one place.

Discovery goes up, not down. The registries live on the lower floors
(:mod:`tailtheory.core.registry` for claims, :mod:`tailtheory.engine.registry` for methods,
:mod:`tailtheory.experiments.study` for studies) and name no section; this module, above the
sections, imports each section's ``claims``, ``methods`` and ``training`` modules, which register
themselves on import. The registries find this module through the package's entry point group
``tailtheory.catalog`` (:func:`tailtheory.core.registry.load_catalog`), so a lookup from Python
sees every claim, method and study without importing a section by name, and another package
can add its own claims, methods or studies by declaring an entry point in that group.

A new section is one line in :data:`SECTIONS` and the imports below.
"""

from __future__ import annotations

# The engine's own methods and learning curve, then each section's registrations, in order.
from tailtheory.engine import methods as _engine_methods  # noqa: F401
from tailtheory.experiments import learning as _learning  # noqa: F401
from tailtheory.softmax import claims as _softmax_claims  # noqa: F401
from tailtheory.mismatch import claims as _mismatch_claims  # noqa: F401
from tailtheory.pruning import claims as _pruning_claims  # noqa: F401
from tailtheory.pruning import methods as _pruning_methods  # noqa: F401
from tailtheory.pruning import training as _pruning_training  # noqa: F401
from tailtheory.lopti import claims as _lopti_claims  # noqa: F401
from tailtheory.lopti import methods as _lopti_methods  # noqa: F401
from tailtheory.lopti import training as _lopti_training  # noqa: F401
from tailtheory.trm import claims as _trm_claims  # noqa: F401
from tailtheory.trm import methods as _trm_methods  # noqa: F401
from tailtheory.trm import training as _trm_training  # noqa: F401
from tailtheory.otb import claims as _otb_claims  # noqa: F401
from tailtheory.otb import methods as _otb_methods  # noqa: F401
from tailtheory.otb import training as _otb_training  # noqa: F401
from tailtheory.tim import claims as _tim_claims  # noqa: F401
from tailtheory.tim import methods as _tim_methods  # noqa: F401
from tailtheory.tim import training as _tim_training  # noqa: F401
from tailtheory.tim import dose as _tim_dose  # noqa: F401
from tailtheory.tim import precision_training as _tim_precision_training  # noqa: F401
from tailtheory.ladder import dose as _ladder_dose  # noqa: F401

SECTIONS = ("softmax", "mismatch", "pruning", "lopti", "trm", "otb", "tim")
"""The paper sections, one subpackage each, in the order of the claims (S, M, P, L, T, O, V)."""
