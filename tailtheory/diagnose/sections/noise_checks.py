"""The three run-wide checks beside the samples beyond the run's numerical noise
(:mod:`tailtheory.diagnose.sections.beyond_noise`), each named with its value and threshold:
what a whole run's mismatch looks like when it is not numerical noise.

- ``rounding``: the noise level ``eps_hat`` against the rounding of logits in the rollout
  engine's precision, ``2^-8 max|z|`` in bfloat16 (``--dtype``, else the dump's stored half
  precision, else bfloat16, said as assumed): the ``max|z|`` it would need, flagged above
  :data:`LOGIT_MAX`.
- ``temperature``: ``Delta`` correlated with ``log p`` (a temperature gap, ``log p_T = log p / T
  + b``), flagged at :data:`TEMP_CORR` in size.
- ``truncation``: ``Delta > 0`` on nearly every token beyond the storage quantum (a sampler
  renormalised over a top-k or top-p set adds ``-log pi(S) > 0`` to every token, DVP's P3,
  arXiv 2512.23087), flagged at :data:`TRUNC_SHARE`.

Each reads run-wide sums (:data:`CHECK_SUMS`) the section folds over the batches.
"""

from __future__ import annotations

import math

from tailtheory.diagnose.quantum import UNIT
from tailtheory.diagnose.sections.base import MIN_GROUP, num, plural

LOGIT_MAX = 50.0
"""A generous bound on LLM logits (Gemma 2 soft-caps them at 30): ``eps_hat`` above
``UNIT x LOGIT_MAX`` is beyond that dtype's rounding of any plausible logits."""
TEMP_CORR = 0.7
"""``|corr(Delta, log p)|`` at least this reads as a temperature mismatch: ``log p_T = log p / T
+ b`` makes ``Delta`` nearly linear in ``log p`` (0.83-0.89 at T = 0.9-1.1 in logit
simulations); numerical noise stays below 0.1 (0.55 at an absurd Student-t noise of sd 0.3)."""
TRUNC_SHARE = 0.9
"""``Delta > 0`` on at least this share of the tokens beyond the quantum reads as a truncated
sampler (top-k / top-p renormalised on one side: P3's offset ``-log pi(S)`` on every token);
numerical noise gives about 0.5 (M4's selection bias lifts it to 0.56 at sd 0.3)."""
CHECK_SUMS = ("n", "sx", "sxx", "sd", "sdd", "sxd", "pos", "neg")
"""Run-wide sums of the checks: tokens, ``log p``, ``log p^2``, ``Delta``, ``Delta^2``,
``Delta log p``, tokens with ``Delta`` above and below ``+-q``."""


def run_checks(eps_hat: float, sums: dict, declared: str | None = None,
               source: str = "stored") -> list[dict]:
    """The three run-wide checks, each ``name``, ``value``, ``threshold``, ``flagged`` and its
    numbers: ``rounding`` (``eps_hat`` over ``UNIT[dtype]``, the ``max|z|`` whose rounding in
    ``declared``, else bfloat16, gives ``eps_hat``, beyond :data:`LOGIT_MAX`; its ``source``:
    ``declared`` by ``--dtype``, ``stored`` as the dump stores it, or ``assumed``), ``temperature``
    (``corr(Delta, log p)`` and the slope of ``Delta`` on ``log p``, from :data:`CHECK_SUMS`,
    at least :data:`TEMP_CORR` in size) and ``truncation`` (the share of tokens beyond the
    quantum with ``Delta > 0``, at least :data:`TRUNC_SHARE` over :data:`MIN_GROUP` tokens)."""
    dtype = declared or "bfloat16"
    z = eps_hat / UNIT[dtype]
    n = sums["n"]
    vx = sums["sxx"] - sums["sx"] ** 2 / n if n else 0.0
    vd = sums["sdd"] - sums["sd"] ** 2 / n if n else 0.0
    c = sums["sxd"] - sums["sx"] * sums["sd"] / n if n else 0.0
    corr = c / math.sqrt(vx * vd) if vx > 0 and vd > 0 else math.nan
    signed = sums["pos"] + sums["neg"]
    share = sums["pos"] / signed if signed else math.nan
    return [{"name": "rounding", "dtype": dtype, "declared": declared is not None,
             "source": source if declared is not None else "assumed",
             "value": z, "threshold": LOGIT_MAX, "flagged": bool(z > LOGIT_MAX)},
            {"name": "temperature", "value": corr, "slope": c / vx if vx > 0 else math.nan,
             "threshold": TEMP_CORR, "flagged": bool(abs(corr) >= TEMP_CORR)},
            {"name": "truncation", "value": share, "tokens": int(signed),
             "threshold": TRUNC_SHARE, "flagged": bool(signed >= MIN_GROUP
                                                       and share >= TRUNC_SHARE)}]


def check_line(c: dict) -> str:
    """One run-wide check of :func:`run_checks` in words."""
    if c["name"] == "rounding":
        how = {"declared": "as --dtype declares it", "stored": "as the dump stores it"}.get(
            c.get("source", "stored" if c["declared"] else "assumed"), "the dtype assumed")
        return (f"rounding: eps_hat would be {c['dtype']}'s rounding of logits "
                f"(2^{round(math.log2(UNIT[c['dtype']]))} max|z|, {how}) up to |z| = "
                f"{num(c['value'])}: "
                + (f"FLAGGED, beyond plausible logits (|z| <= {c['threshold']:g}), more than "
                   f"rounding" if c["flagged"] else
                   f"within plausible logits (|z| <= {c['threshold']:g})") + ".")
    if c["name"] == "temperature":
        return (f"temperature: corr(Delta, log p) = {num(c['value'], '.2g')} (slope "
                f"{num(c['slope'], '.2g')}): "
                + ("FLAGGED, a temperature mismatch" if c["flagged"] else
                   "not a temperature mismatch") + f" (one makes it at least {c['threshold']:g} "
                f"in size).")
    return (f"truncation: Delta > 0 on {num(100 * c['value'], '.3g')}% of "
            f"{plural(c['tokens'], 'token')} beyond the quantum: "
            + ("FLAGGED, a truncated sampler" if c["flagged"] else "not a truncated sampler")
            + f" (top-k or top-p renormalised on one side, P3, makes it at least "
            f"{100 * c['threshold']:g}%).")
