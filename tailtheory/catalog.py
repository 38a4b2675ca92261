"""The catalog: every paper section's claims, methods, studies and stored measurements, collected
in one place.

Discovery goes up, not down. The registries live on the lower floors
(:mod:`tailtheory.core.registry` for claims, :mod:`tailtheory.engine.registry` for methods,
:mod:`tailtheory.experiments.study` for studies, :mod:`tailtheory.experiments.measures` for the
other stored measurements) and name no section; this module, above the sections, imports each
section's ``claims``, ``methods`` and ``training`` modules and the modules that measure its
stores, which register themselves on import. The registries find this module through the package's entry point group
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
# The modules that measure a stored measurement (results/<name>.json) and register it.
from tailtheory.lopti import measurement as _lopti_measurement  # noqa: F401
from tailtheory.lopti import learn_probes as _lopti_learn_probes  # noqa: F401
from tailtheory.lopti.decisive import calibration as _decisive_calibration  # noqa: F401
from tailtheory.lopti.decisive import frontier as _decisive_frontier  # noqa: F401
from tailtheory.lopti.decisive import store as _decisive_store  # noqa: F401
from tailtheory.pruning import matched_tails as _pruning_matched_tails  # noqa: F401
from tailtheory.pruning import trained_tails as _pruning_trained_tails  # noqa: F401
from tailtheory.ladder import build as _ladder_build  # noqa: F401
from tailtheory.ladder import effects as _ladder_effects  # noqa: F401
from tailtheory.ladder import mismatch as _ladder_mismatch  # noqa: F401
from tailtheory.regime import measure as _regime_measure  # noqa: F401
from tailtheory.experiments.measures import Measure, register_measure

SECTIONS = ("softmax", "mismatch", "pruning", "lopti", "trm", "otb", "tim")
"""The paper sections, one subpackage each, in the order of the claims (S, M, P, L, T, O, V)."""

VERDICTS = register_measure(Measure(
    "verdicts", "the no-learning regime's verdicts, recorded once and printed beside today's "
    "(tailtheory.core.registry.superseded)", superseded="today's verdicts (tailtheory verify)"))
"""``results/superseded/verdicts.json``: read by the claims registry, which knows no store."""
