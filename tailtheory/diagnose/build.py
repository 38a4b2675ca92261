"""The assembly of a :class:`~tailtheory.diagnose.sections.base.Diagnosis` from the sums: every
section of :data:`tailtheory.diagnose.sections.SECTIONS`, in the report's order.

Source: DVP (arXiv 2512.23087; M3-M6, P2, P4), TRM (arXiv 2512.23075; T12), TIM
(arXiv 2605.14220; k1, k3). Thresholds and summary keys:
:mod:`tailtheory.diagnose.sections.base`; the placement on the dose-response register (V6):
:mod:`tailtheory.diagnose.register`.
"""

from __future__ import annotations

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.base import SUMMARY_KEYS, Context, Diagnosis, complete


def diagnosis(acc: Accumulator, delta_max: float, delta_avg: float,
              register: list[dict] | None = None, params: float | None = None) -> Diagnosis:
    """Every section from the sums of a finished :class:`Accumulator`: the fault checks first,
    the run placed on the dose-response register and the bottom line last (``register``: rows
    of ``tailtheory.tim.dose.register_table``; ``None`` reads the stored one; ``params``: the
    run's model parameters, for the ladder's nearest rung). Raises
    ``ValueError`` when no row was included or a fault is an error."""
    acc.check_complete()
    if acc.groups["all"]["n"] == 0:
        raise ValueError(f"no row with finite log-probs in {len(acc.files)} dump(s) "
                         f"({acc.excluded_rows} excluded)")
    s = complete(acc)
    d = Diagnosis(summary=dict(files=len(acc.files), sequences=len(s["n_tok"]),
                               excluded_rows=acc.excluded_rows,
                               excluded_by_column=dict(acc.excluded_by_column),
                               excluded_sequences=int((acc.seq["excluded"][:acc.n_seq] > 0).sum()),
                               tail_p=acc.tail_p, head_p=acc.head_p))
    ctx = Context(acc, s, delta_max, delta_avg, register, params)
    for section in SECTIONS:
        section.table(ctx, d)
    d.summary = {k: d.summary.get(k) for k in SUMMARY_KEYS}
    return d
