"""The run's mean k3 on the mismatch dose-response register (V6): the placement of
:mod:`tailtheory.diagnose.register`, with its caveat of scale; also ``register.json``.

Source: TIM (arXiv 2605.14220) for k3; the register of :mod:`tailtheory.tim.dose` (V6).
"""

from __future__ import annotations

import json

from tailtheory.diagnose.register import register_section
from tailtheory.diagnose.sections.base import Diagnosis, Section, json_safe

NAME = "register"


def register_files(d: Diagnosis) -> dict[str, str]:
    """``register.json``: the run's placement on the register, when it was placed."""
    if NAME not in d.points:
        return {}
    return {"register.json": json.dumps(json_safe(d.points[NAME]), indent=2) + "\n"}


SECTION = Section(NAME, "The run's mean k3 on the mismatch dose-response register", "V6",
                  lambda ctx, d: register_section(d, ctx.register, ctx.params),
                  files=register_files)
