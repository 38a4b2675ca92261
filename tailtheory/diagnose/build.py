"""The assembly of a :class:`~tailtheory.diagnose.sections.base.Diagnosis` from the sums: every
section of :data:`tailtheory.diagnose.sections.SECTIONS`, in the report's order, and the keys
of ``summary.json`` gathered from them (:data:`SUMMARY_KEYS`).

Source: DVP (arXiv 2512.23087; M3-M6, P2, P4), TRM (arXiv 2512.23075; T12), TIM
(arXiv 2605.14220; k1, k3). Thresholds: :mod:`tailtheory.diagnose.sections.base`; each
section's summary keys: its record's ``summary``; the placement on the dose-response register
(V6): :mod:`tailtheory.diagnose.sections.register`.
"""

from __future__ import annotations

from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.base import Context, Diagnosis, Section, complete

RUN_KEYS = {
    "files": "dump files read",
    "sequences": "responses (file, step, sample_id) with every row included",
    "excluded_rows": "rows left out: a log-prob or a top-k entry is NaN or +-inf",
    "excluded_by_column": "the same per column, named as in the file (a row may count twice)",
    "excluded_sequences": "responses with an excluded row: left out of the sequence sections",
    "tail_p": "tail tokens: trainer p < tail_p (M6's TAIL_P)",
    "head_p": "head tokens: trainer p > head_p (M7's HEAD_P)",
}
"""The keys of ``summary.json`` that :func:`diagnosis` writes itself, before any section: the
run as read and its options."""

SUMMARY_ORDER = (
    "files", "tokens", "sequences", "steps", "excluded_rows", "excluded_by_column",
    "excluded_sequences", "k1", "k3", "abs_delta_mean", "abs_delta_max", "tail_p", "head_p",
    "tail_tokens", "head_tokens", "tail_abs_delta_mean", "head_abs_delta_mean",
    "tail_head_ratio", "mean_delta", "mean_delta_t", "tail_bias", "tail_bias_t", "head_bias",
    "head_bias_t", "eps_implied_q50", "eps_implied_q99", "eps_implied_max", "trm_delta_max",
    "trm_delta_avg", "trm_accept_rate", "trm_accept_rate_avg", "trm_accept_rate_both",
    "trm_token_violation_rate", "m6", "dvp", "topk_k", "rho_mean", "rho_min", "rho_max",
    "ratio_caps", "tis_truncated_frac", "band_masked_frac", "seq_tis_truncated_frac",
    "seq_masked_frac", "k3_clamped", "k3_outside_share", "certify", "resume", "seq_ratio",
    "logged_ratio", "beyond_noise", "drift",
    "faults", "bottom_line",
)
"""The order of ``summary.json``'s keys as first published (later keys before the faults and
the bottom line), kept so that summaries written before and after diff cleanly; names only
(what each key holds is written once, by its section). A key not named here follows these, in
the order of the sections."""


def summary_keys(sections: tuple[Section, ...], run: dict[str, str] = RUN_KEYS,
                 order: tuple[str, ...] = SUMMARY_ORDER) -> dict[str, str]:
    """Every key of ``summary.json`` and what it holds: ``run``'s and each section's
    (``Section.summary``), in ``order``, then the rest in the sections' order. Raises
    ``ValueError`` when two of them write the same key or ``order`` names a key none writes."""
    keys, owner = dict(run), dict.fromkeys(run, "the run")
    for s in sections:
        for k, text in s.summary.items():
            if k in keys:
                raise ValueError(f"summary key {k!r} of section {s.name!r} is also written by "
                                 f"{owner[k]}")
            keys[k], owner[k] = text, f"section {s.name!r}"
    unknown = [k for k in order if k not in keys]
    if unknown:
        raise ValueError(f"the summary's order names keys no section writes: {unknown}")
    return {k: keys[k] for k in (*order, *(k for k in keys if k not in order))}


SUMMARY_KEYS = summary_keys(SECTIONS)
"""Every key of ``summary.json`` and what it holds, in the file's order; ``Delta`` is inference
minus trainer."""


def diagnosis(acc: Accumulator, delta_max: float, delta_avg: float,
              register: list[dict] | None = None, params: float | None = None,
              bar: float | None = None, resume_at: int | None = None,
              dtype: str | None = None) -> Diagnosis:
    """Every section from the sums of a finished :class:`Accumulator`: the fault checks first,
    the run placed on the dose-response register and the bottom line last (``register``: rows
    of ``tailtheory.tim.dose.register_table``; ``None`` reads the stored one; ``params``: the
    run's model parameters, for the ladder's nearest rung; ``bar``: the certification's bar on
    each step's mean k3, ``None`` its default; ``resume_at``: the step a resumed run restarted
    at, ``None`` for no resume check; ``dtype``: the rollout engine's declared precision,
    ``None`` when not declared). Raises ``ValueError`` when no row was included, a fault
    is an error or the resume cannot be checked."""
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
    ctx = Context(acc, s, delta_max, delta_avg, register, params, bar, resume_at, dtype)
    for section in SECTIONS:
        section.table(ctx, d)
    d.summary = {k: d.summary.get(k) for k in SUMMARY_KEYS}
    return d
