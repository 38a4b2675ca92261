"""TRM's method of the GRPO engine (``tailtheory/trm/methods.py``, T12): exact and sampled-token
estimators, its metric next to the trainer's monitor, the shared acceptance, its registration
and the check of its mode, estimator and thresholds."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from policy_batches import HP, batch
from tailtheory.engine.methods import trm_sampled_keep
from tailtheory.engine.registry import get_method, registered
from tailtheory.trm import methods as tm


def test_registered_as_a_correction_with_its_check():
    m = registered()["trm"]
    assert (m.stage, m.metrics, m.validate) == ("correction", ("trm/kept_frac",), tm.check_trm)
    assert m.fn.__module__ == "tailtheory.trm.methods"


@pytest.mark.parametrize("kw, message", [
    (dict(trm_mode="x"), r"trm_mode must be one of \('max', 'avg', 'both'\), got 'x'"),
    (dict(trm_estimator="x"), "trm_estimator must be 'exact' or 'k2k3', got 'x'"),
    (dict(trm_delta_max=0.0), "trm_delta_max must be a finite number > 0, got 0.0"),
    (dict(trm_delta_avg=float("inf")), "trm_delta_avg must be a finite number > 0, got inf"),
])
def test_bad_hyperparameters_raise_whatever_the_method(kw, message):
    """Checked on every config: the trainer's acceptance monitor reads them in every run."""
    from tailtheory.engine.config import TrainConfig

    with pytest.raises(ValueError, match=message):
        TrainConfig(model="tiny", method="ar", **kw)
    with pytest.raises(ValueError, match=message):
        tm.check_trm(replace(HP, **kw))


def test_trm_exact_and_sample_estimators():
    """T12: exact KL rows (0.01, 0.02) and (0.1, 0): max filter 0.05 keeps seq 0 only; avg filter
    0.02 (means 0.015, 0.05) too. k2k3: log r = (0.1, 0) and (0.5, 0): k2 = 0.005 and 0.125."""
    kl = torch.tensor([[0.01, 0.02], [0.1, 0.0]], dtype=torch.float64)
    b = batch(old_p=[[0.5, 0.5], [0.5, 0.5]], tok_kl=kl)
    for mode, hp in (("max", HP), ("avg", replace(HP, trm_mode="avg", trm_delta_avg=0.02)),
                     ("both", replace(HP, trm_mode="both", trm_delta_avg=0.02))):
        w, m = get_method("trm").fn(b, hp)
        assert w.tolist() == [[1.0, 1.0], [0.0, 0.0]], mode
        assert m["trm/kept_frac"] == 0.5
    b = batch(old_p=[[0.5 * math.exp(0.1), 0.5], [0.5 * math.exp(0.5), 0.5]],
              roll_p=[[0.5, 0.5], [0.5, 0.5]])
    w, _ = get_method("trm").fn(b, replace(HP, trm_estimator="k2k3"))
    assert w.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="tok_kl"):
        get_method("trm").fn(b, HP)


def test_trm_correction_metric_does_not_clash_with_monitor():
    """The trm correction reports trm/kept_frac; trm/accept_rate belongs to the trainer's
    monitor, which every metrics line carries."""
    b = batch(old_p=[[0.5, 0.5]], tok_kl=torch.zeros(1, 2, dtype=torch.float64))
    _, m = get_method("trm").fn(b, HP)
    assert set(m) == {"trm/kept_frac"}


def test_trm_reuses_the_trainers_acceptance():
    """TRM (T12), k2k3: the trm method keeps what ``trm_accept`` says (the trainer computed it
    once for its monitor), and without it computes the same mask itself."""
    b = batch(old_p=[[0.5 * math.exp(0.1), 0.5], [0.5 * math.exp(0.5), 0.5]],
              roll_p=[[0.5, 0.5], [0.5, 0.5]])
    hp = replace(HP, trm_estimator="k2k3")
    own, _ = get_method("trm").fn(b, hp)
    accept = trm_sampled_keep(b.mask, b.log_rho, hp)
    shared, _ = get_method("trm").fn(replace(b, trm_accept=accept), hp)
    assert torch.equal(own, shared) and accept.tolist() == [True, False]
    forced, _ = get_method("trm").fn(replace(b, trm_accept=torch.tensor([False, True])), hp)
    assert forced.tolist() == [[0.0, 0.0], [1.0, 1.0]]
