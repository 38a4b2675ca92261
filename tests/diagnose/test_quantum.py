"""How a dump stores its log-probs, and the most storing moves a ``Delta``
(``tailtheory.diagnose.quantum``): read from the values (JSON lines) or from the stored float
type (parquet, ``.pt``)."""

import numpy as np
import pytest
import torch

from tailtheory.diagnose.quantum import (UNIT, quantum_of, storage_of, storage_of_precision,
                                         storage_words)


def _stored(x, kind):
    return torch.from_numpy(x).to(getattr(torch, kind)).double().numpy()


def test_storage_is_read_from_the_values_coarsest_first():
    x = np.random.default_rng(0).normal(-2, 1, 500)
    assert storage_of(np.round(x, 3), np.round(x - 0.01, 3)) == "decimals:3"
    assert storage_of(_stored(x, "float32"), _stored(x, "float32")) == "float32"
    assert storage_of(_stored(x, "bfloat16"), _stored(x - 0.1, "bfloat16")) == "bfloat16"
    assert storage_of(_stored(x, "float16"), _stored(x - 0.1, "float16")) == "float16"
    assert storage_of(x, x - 1e-3) == "float64"
    assert storage_of(np.zeros(3), np.zeros(3)) == "float64"          # nothing to read
    # NaN rows are left out, not read as off the grid
    assert storage_of(np.r_[np.round(x, 2), np.nan], np.r_[np.round(x, 2), 0.0]) == "decimals:2"


def test_quantum_of_each_storage():
    lt, lr = np.array([-1.0, -0.5]), np.array([-2.0, -0.25])
    np.testing.assert_array_equal(quantum_of("decimals:3", lt, lr), [1e-3, 1e-3])
    np.testing.assert_allclose(quantum_of("bfloat16", lt, lr), [3 * 2.0 ** -8, 0.75 * 2.0 ** -8])
    # a value stored in bfloat16 is within the quantum of the exact one
    x = np.random.default_rng(1).normal(-3, 2, 1000)
    moved = np.abs((_stored(x, "bfloat16") - _stored(x - 0.2, "bfloat16")) - 0.2)
    assert (moved <= quantum_of("bfloat16", x, x - 0.2)).all()
    with pytest.raises(KeyError):
        quantum_of("int8", lt, lr)


def test_stored_precision_names_the_coarsest_type():
    assert storage_of_precision("bfloat16 as stored") == "bfloat16"
    assert storage_of_precision("logp_train float64, logp_rollout float32 as stored") == "float32"
    assert storage_of_precision("unknown") is None and storage_of_precision(None) is None
    assert "2^-8" in storage_words("bfloat16") and "1e-3 per Delta" in storage_words("decimals:3")
    assert storage_words("decimals:1").startswith("JSON decimals rounded to 1 place,")
    assert UNIT["float16"] == 2.0 ** -11
