"""The run-wide checks beside the samples beyond the run's noise
(``tailtheory.diagnose.sections.noise_checks``) on hand-made sums: each flags its own fault and
only it, names its source of dtype, and reads a degenerate run as not available; the section's planted
dumps are ``tests/diagnose/sections/test_beyond_noise.py``."""

import math

import numpy as np

from tailtheory.diagnose.sections.noise_checks import (CHECK_SUMS, LOGIT_MAX, TEMP_CORR,
                                                       TRUNC_SHARE, check_line, run_checks)


def _sums(logp, delta, q=1e-6):
    """The run-wide sums of :data:`CHECK_SUMS` of tokens ``logp`` with mismatch ``delta``."""
    return dict(zip(CHECK_SUMS, (len(logp), logp.sum(), (logp ** 2).sum(), delta.sum(),
                                 (delta ** 2).sum(), (delta * logp).sum(),
                                 int((delta > q).sum()), int((delta < -q).sum()))))


def _flagged(checks):
    return [c["name"] for c in checks if c["flagged"]]


def test_each_check_flags_its_fault_and_only_it():
    rng = np.random.default_rng(0)
    logp = -rng.exponential(1.0, 2000)
    noise = rng.normal(0, 1e-3, 2000)
    assert _flagged(run_checks(1e-3, _sums(logp, noise))) == []
    temperature = logp / 0.95 - logp + noise                       # log p_T - log p, T = 0.95
    assert _flagged(run_checks(1e-3, _sums(logp, temperature))) == ["temperature"]
    truncation = rng.uniform(0.01, 0.05, 2000)                     # -log pi(S) > 0 everywhere
    assert _flagged(run_checks(1e-3, _sums(logp, truncation))) == ["truncation"]
    eps_hat = 2.0 ** -8 * (LOGIT_MAX + 1)                          # more than bf16 rounding
    assert _flagged(run_checks(eps_hat, _sums(logp, noise))) == ["rounding"]
    assert TEMP_CORR == 0.7 and TRUNC_SHARE == 0.9


def test_the_dtype_and_its_source():
    s = _sums(np.array([-1.0, -2.0, -3.0]), np.array([1e-3, -1e-3, 2e-3]))
    bf, f16, decl = (run_checks(2.0 ** -8, s)[0], run_checks(2.0 ** -8, s, "float16")[0],
                     run_checks(2.0 ** -8, s, "float16", "declared")[0])
    assert (bf["dtype"], bf["source"], bf["value"]) == ("bfloat16", "assumed", 1.0)
    assert (f16["dtype"], f16["source"], f16["value"]) == ("float16", "stored", 8.0)
    assert decl["source"] == "declared" and "as --dtype declares it" in check_line(decl)
    assert "the dtype assumed" in check_line(bf) and "as the dump stores it" in check_line(f16)


def test_degenerate_runs_read_not_available():
    c = run_checks(0.0, _sums(np.array([-1.0, -1.0]), np.zeros(2)))
    temp, trunc = c[1], c[2]
    assert math.isnan(temp["value"]) and not temp["flagged"]
    assert math.isnan(trunc["value"]) and trunc["tokens"] == 0 and not trunc["flagged"]
    empty = run_checks(0.0, dict.fromkeys(CHECK_SUMS, 0))
    assert _flagged(empty) == [] and all(isinstance(check_line(x), str) for x in empty)
