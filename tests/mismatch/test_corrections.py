"""TIM's corrections (``tailtheory/mismatch/corrections.py``, claim V4): token TIS, sequence
masking (MIS) and IcePop on ``log_rho = log pi_train - log pi_roll``. By-hand values are in
``tests/engine/test_methods.py`` (through the registered methods); here, bad inputs raise naming
the argument and bad hyperparameters raise naming the knob."""

from __future__ import annotations

import pytest
import torch

from tailtheory.mismatch.corrections import icepop_keep, mis_keep, seq_log_ratio, tis_weight

NAN_CASES = [
    ("tis_weight", lambda x, m: tis_weight(x, 2.0)),
    ("seq_log_ratio", lambda x, m: seq_log_ratio(x, m, False)),
    ("mis_keep", lambda x, m: mis_keep(x, m, 0.5, 2.0)),
    ("icepop_keep", lambda x, m: icepop_keep(x, 0.5, 2.0)),
]


@pytest.mark.parametrize("name, call", NAN_CASES, ids=[c[0] for c in NAN_CASES])
def test_reject_nan_V4(name, call):
    """A NaN log-ratio (even at a masked position) is an error naming ``log_rho``."""
    x = torch.full((2, 3), -0.5, dtype=torch.float64)
    x[0, 2] = float("nan")
    m = torch.ones(2, 3, dtype=torch.bool)
    m[0, 2] = False
    with pytest.raises(ValueError, match="log_rho"):
        call(x, m)


@pytest.mark.parametrize("call", [
    lambda: seq_log_ratio(torch.zeros(2, 3), torch.ones(3).bool(), False),
    lambda: mis_keep(torch.zeros(2, 3), torch.ones(3).bool(), 0.5, 2.0),
], ids=["seq_log_ratio", "mis_keep"])
def test_reject_shape_mismatch_V4(call):
    """``mis_keep(log_rho (2, 3), mask (3,))`` raises instead of broadcasting."""
    with pytest.raises(ValueError, match="log_rho"):
        call()


@pytest.mark.parametrize("call, knob", [
    (lambda x, m: tis_weight(x, 0.0), "tis_cap"),
    (lambda x, m: mis_keep(x, m, 2.0, 2.0), "mis_low < mis_high"),
    (lambda x, m: icepop_keep(x, 1.5, 2.0), "icepop_low < 1"),
], ids=["tis_cap", "mis_band", "icepop_band"])
def test_reject_empty_band_or_cap_V4(call, knob):
    with pytest.raises(ValueError, match=knob):
        call(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))
