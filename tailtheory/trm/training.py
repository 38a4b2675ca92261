"""TRM masking in training (claim T14): acceptance against response length, and whether masking
whole sequences keeps training stable where PPO's token clipping alone does not.

Source: TRM (Li et al., arXiv 2512.23075). TRM keeps a sequence iff its largest token
divergence stays under ``delta_max``; with sampled-token log-ratios the max filter uses
``k2 = (log rho)^2 / 2`` (T12). With an i.i.d. per-token violation rate ``q`` a sequence of
``T`` tokens is kept with probability ``(1 - q)^T``: long responses are masked more.

Data: the token dumps of TIM's study ``mismatch_learn`` (:data:`tailtheory.tim.training.STUDY`:
``bf16`` and ``fp8`` rollouts on the learning testbed, both ``pi_old`` modes; ``log_rho =
log pi_train - log pi_roll``), whose rows keep
:func:`tailtheory.tim.length_acceptance.t14_token_numbers` of each dump. Per run and threshold
``delta`` of ``T14_DELTAS``: ``q`` = fraction of response tokens with ``k2 > delta``; per length
bin (``LEN_EDGES``) the fraction of sequences kept against the mean over the bin's sequences of
``(1 - q)^T``. Stability (b) is read on V6's dose study (:data:`tailtheory.tim.dose.STUDY`),
whose remedies (TRM among them) run with GRPO at the logit-noise dose where GRPO is first harmed.

Verdict (fixed before measuring): (a) *length law*: over the mismatch runs, every length bin
with at least :data:`MIN_SEQS` sequences and every ``delta`` with ``q > 0`` has
``|kept - predicted| <= ACCEPT_TOL``; (b) *stability*: on the base the remedies run on (the arm of
the TRM remedy), when that configuration is harmed (GRPO's final reward below ``exact``'s by
> 2 se), TRM's final reward above GRPO's by > 2 se (``TOY-SCALE``) or
below it by > 2 se (``REFUTED``). T14 is ``TOY-SCALE`` when (a) holds and (b) is TOY-SCALE,
``REFUTED`` when (a) fails or (b) is REFUTED, else ``NOT-REPRODUCED`` (in particular when the
base is not harmed: there is no instability for masking to remove).
"""

from __future__ import annotations

from tailtheory.core.registry import Evidence, Verdict
from tailtheory.experiments.comparison import Measurement
from tailtheory.tim.length_acceptance import LEN_EDGES, T14_DELTAS

MIN_SEQS = 30
"""A length bin enters the verdict with at least this many sequences (pooled over seeds)."""

ACCEPT_TOL = 0.1
"""(a): measured and predicted acceptance agree within 0.1 (absolute)."""


def _mismatch_labels(m: Measurement) -> list[str]:
    """The arms with a mismatch (not the ``exact`` path)."""
    return [lb for lb in m if m.tags[lb]["path"] != "exact"]


def length_acceptance_table(data, labels=None):
    """Long table ``label, delta, q, bin, lo, hi, n, kept, predicted, q_bin, predicted_bin_q``
    pooled over seeds, from the runs of ``labels`` (default: every run with a token dump and a
    mismatch); ``predicted`` uses the run's rate ``q``, ``predicted_bin_q`` the bin's own."""
    import pandas as pd

    from tailtheory.tim.training import STUDY

    m = STUDY.measurement(data)
    labels = labels or [lb for lb in _mismatch_labels(m) if "t14" in m[lb][0]]
    out = []
    for label in labels:
        rows = [r["t14"] for r in m[label]]
        for d in rows[0]:
            tok, vio = sum(r[d]["tokens"] for r in rows), sum(r[d]["violations"] for r in rows)
            for b in range(len(LEN_EDGES) - 1):
                n = sum(r[d]["n"][b] for r in rows)
                if n:
                    out.append({"label": label, "delta": float(d), "q": vio / tok, "bin": b,
                                "lo": LEN_EDGES[b], "hi": LEN_EDGES[b + 1], "n": n,
                                "kept": sum(r[d]["kept"][b] for r in rows) / n,
                                "predicted": sum(r[d]["pred"][b] for r in rows) / n,
                                "q_bin": sum(r[d]["bin_violations"][b] for r in rows)
                                / sum(r[d]["bin_tokens"][b] for r in rows),
                                "predicted_bin_q": sum(r[d]["pred_bin_q"][b] for r in rows) / n})
    return pd.DataFrame(out)


def _length_law(m: Measurement) -> tuple[bool, dict]:
    """(a) of the rule over ``m``'s mismatch runs with token dumps: whether it holds, and its
    numbers (worst deviation, bins checked, per run label and threshold the short/long bins)."""
    df = length_acceptance_table(m)
    live = df[(df["q"] > 0) & (df["n"] >= MIN_SEQS)]
    dev = (live["kept"] - live["predicted"]).abs()
    law_ok = bool(len(live)) and float(dev.max()) <= ACCEPT_TOL
    dev_own = (live["kept"] - live["predicted_bin_q"]).abs()
    nums = {"length_law:max_abs_dev": float(dev.max()) if len(live) else float("nan"),
            "length_law:bins_checked": int(len(live)),
            "length_law:max_abs_dev_own_bin_q": float(dev_own.max()) if len(live) else float("nan")}
    for (label, delta), g in df.groupby(["label", "delta"]):
        first, last = g.iloc[0], g[g["n"] >= MIN_SEQS].iloc[-1]
        nums[f"{label} delta={delta:g}:q"] = float(g["q"].iloc[0])
        nums[f"{label} delta={delta:g}:kept_short/long"] = (f"{first['kept']:.3f}/"
                                                            f"{last['kept']:.3f}")
        nums[f"{label} delta={delta:g}:pred_short/long"] = (f"{first['predicted']:.3f}/"
                                                            f"{last['predicted']:.3f}")
        nums[f"{label} delta={delta:g}:q_bin_short/long"] = (f"{first['q_bin']:.3g}/"
                                                             f"{last['q_bin']:.3g}")
    return law_ok, nums


def _verdict(law_ok: bool, harmed: bool, c) -> Verdict:
    """T14's verdict from (a) and (b): ``c`` compares TRM with GRPO on the base."""
    stab = c.verdict if harmed else Verdict.NOT_REPRODUCED
    return (Verdict.REFUTED if not law_ok or stab == Verdict.REFUTED else
            Verdict.TOY_SCALE if stab == Verdict.TOY_SCALE else Verdict.NOT_REPRODUCED)


def _criterion(base: str) -> str:
    return (f"criterion: (a) kept fraction per length bin (>= {MIN_SEQS} sequences) within "
            f"{ACCEPT_TOL} of mean (1-q)^T at k2 thresholds "
            f"{', '.join(f'{d:g}' for d in T14_DELTAS)}; (b) on {base}, if harmed, TRM's final "
            f"reward above GRPO's by > 2 se")


def t14_evidence(law_data, base_data) -> Evidence:
    """T14 on the learning testbed (rule in the module docstring): (a) over the mismatch runs of
    V3's study (``law_data``); (b) on the base of the dose study's TRM remedy (``base_data``):
    its GRPO arm harmed against ``exact`` on final reward, then TRM against GRPO there on final
    reward (final held-out accuracy beside, not in the verdict)."""
    from tailtheory.tim.dose import STUDY as DOSE
    from tailtheory.tim.training import STUDY as PATHS

    law_ok, nums = _length_law(PATHS.measurement(law_data))
    m = DOSE.measurement(base_data)
    trm = m.label(role="remedy", method="trm")
    sigma = m.tags[trm]["sigma"]
    base = m.label(role="dose", kind=m.tags[trm]["kind"], sigma=sigma)
    exact = m.label(role="baseline")
    harm = m.compare(exact, base, "final_reward")
    harmed = harm.verdict == Verdict.TOY_SCALE
    c = m.compare(trm, base, "final_reward")
    held = m.compare(trm, base, "final_eval")
    nums.update({"base": base, "base_harmed": "yes" if harmed else "no",
                 "base_gap_vs_exact": harm.delta, "base_gap_se": harm.se,
                 "trm_minus_grpo": c.delta, "trm_minus_grpo_se": c.se,
                 "trm_minus_grpo:final_heldout": held.delta,
                 "trm_minus_grpo:final_heldout_se": held.se})
    return Evidence(_verdict(law_ok, harmed, c), nums, _criterion(base),
                    key=("trm_minus_grpo", "trm_minus_grpo_se", "base_harmed",
                         "length_law:max_abs_dev"))
