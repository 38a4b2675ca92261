"""The bottom line, last: what to do, from the run's place on the register and the faults found
(:func:`tailtheory.diagnose.register.bottom_line`), with the register's caveat of scale.

Source: the register of :mod:`tailtheory.tim.dose` (V6) and :mod:`tailtheory.diagnose.faults`.
"""

from __future__ import annotations

from tailtheory.diagnose.register import bottom_line
from tailtheory.diagnose.sections.base import Section

NAME = "bottom_line"

SECTION = Section(NAME, "Bottom line: what to do", "V6's register and the faults",
                  lambda ctx, d: bottom_line(d))
