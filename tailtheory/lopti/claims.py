"""Checks of LOPTI's claims (Yang et al., arXiv 2505.12929).

L2, L3 and L6 compare training runs (``tailtheory.lopti.training``): under the ``quick`` profile
they read the measurement the ``full`` preset of notebook 04 stored in ``results/``; under
``thorough`` they re-run (or find in the run cache) every run and store the numbers again.
"""

from __future__ import annotations

from tailtheory.core.registry import Evidence, Verdict, register
from tailtheory.lopti import training


@register("L2", paper="LOPTI", statement="Advantage Reweighting (alpha 0.3) trains better than "
          "GRPO", expected=Verdict.NOT_REPRODUCED)
def _l2(profile: str) -> Evidence:
    return training.l2_evidence(training.training_data(profile))


@register("L3", paper="LOPTI", statement="Lopti (low-probability tokens first, eta 0.5) trains "
          "better than GRPO and than its reversed order", expected=Verdict.NOT_REPRODUCED)
def _l3(profile: str) -> Evidence:
    return training.l3_evidence(training.training_data(profile))


@register("L6", paper="LOPTI", statement="GRPO -> +AR+Lopti raises held-out K&K accuracy "
          "(0.39 -> 0.57 at 3B)", expected=Verdict.NOT_REPRODUCED)
def _l6(profile: str) -> Evidence:
    return training.l6_evidence(training.training_data(profile))
