"""TIM's corrections as methods of the GRPO engine (``tailtheory/tim/methods.py``, V4): each
weight on a batch small enough to check by hand, detached weights, corrections that multiply,
their registration, and the one check of their caps and bands."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from policy_batches import ATOL, HP, batch
from tailtheory.engine.registry import correction_weight, get_method, parse_methods, registered
from tailtheory.tim import methods as tm

NAMES = ("tis", "seq_tis", "mis", "seq_reject", "geo_reject", "icepop", "token_reject")


def test_registered_as_corrections_sharing_one_check():
    methods = registered()
    for name in NAMES:
        m = methods[name]
        assert m.stage == "correction" and m.validate is tm.check_corrections, name
        assert m.fn.__module__ == "tailtheory.tim.methods"
        assert all(k.startswith(f"{name}/") for k in m.metrics), name


@pytest.mark.parametrize("kw, message", [
    (dict(tis_cap=0.0), "tis_cap must be > 0, got 0.0"),
    (dict(seq_tis_cap=-1.0), "seq_tis_cap must be > 0"),
    (dict(mis_low=2.0, mis_high=2.0), "need 0 <= mis_low < mis_high"),
    (dict(geo_low=1.001, geo_high=0.999), "need 0 <= geo_low < geo_high"),
    (dict(icepop_low=1.0), "need 0 < icepop_low < 1 < icepop_high"),
])
def test_bad_caps_and_bands_raise_whatever_the_method(kw, message):
    from tailtheory.engine.config import TrainConfig

    with pytest.raises(ValueError, match=message):
        TrainConfig(model="tiny", method="grpo", **kw)
    with pytest.raises(ValueError, match=message):
        tm.check_corrections(replace(HP, **kw))
    tm.check_corrections(replace(HP, tis_cap=float("inf"), mis_high=float("inf")))


def test_tis_truncates_at_cap():
    """V4 token TIS: r = pi_old / pi_roll = (0.5, 3.0), C = 2 -> weights (0.5, 2.0)."""
    b = batch(old_p=[[0.1, 0.6]], roll_p=[[0.2, 0.2]])
    w, m = get_method("tis").fn(b, HP)
    torch.testing.assert_close(w, torch.tensor([[0.5, 2.0]], dtype=w.dtype), atol=1e-12, rtol=0)
    assert m["tis/trunc_frac"] == 0.5


def seq_batch():
    # seq 0: rho = (2, 2), product 4, geometric mean 2; seq 1: rho = (0.9, 1.1), product 0.99,
    # geometric mean sqrt(0.99) = 0.99499
    return batch(old_p=[[0.4, 0.4], [0.18, 0.22]], roll_p=[[0.2, 0.2], [0.2, 0.2]])


def test_mis_weighs_by_the_sequence_ratio_inside_the_band():
    """V4 masked IS, band [0.5, 2]: seq 0 (product 4) -> weight 0; seq 1 (product 0.99) ->
    weight 0.99 on both tokens (the ratio, not 1). Metrics: 1 of 2 rejected; mean (0 + 0.99) / 2."""
    w, m = get_method("mis").fn(seq_batch(), HP)
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0], [0.99, 0.99]], dtype=w.dtype),
                               atol=ATOL, rtol=0)
    assert m["mis/reject_rate"] == 0.5
    assert m["mis/weight_mean"] == pytest.approx(0.495, abs=ATOL)


def test_seq_reject_and_geo_reject_keep_with_weight_one():
    """V4 rejections, weight 1 when kept. seq_reject, band [0.5, 2] on the product: (4 -> 0,
    0.99 -> 1). geo_reject on the geometric mean (2, 0.99499): band [0.5, 2] keeps both (2 is
    on the edge); band [0.999, 1.001] (the default) drops both; band [0.99, 1.01] keeps seq 1."""
    b = seq_batch()
    w, m = get_method("seq_reject").fn(b, HP)
    assert w.tolist() == [[0.0, 0.0], [1.0, 1.0]] and m["seq_reject/reject_rate"] == 0.5
    w, m = get_method("geo_reject").fn(b, replace(HP, geo_low=0.5, geo_high=2.0))
    assert w.tolist() == [[1.0, 1.0], [1.0, 1.0]] and m["geo_reject/reject_rate"] == 0.0
    w, m = get_method("geo_reject").fn(b, HP)
    assert w.tolist() == [[0.0, 0.0], [0.0, 0.0]] and m["geo_reject/reject_rate"] == 1.0
    w, _ = get_method("geo_reject").fn(b, replace(HP, geo_low=0.99, geo_high=1.01))
    assert w.tolist() == [[0.0, 0.0], [1.0, 1.0]]


def test_seq_tis_truncates_the_sequence_ratio():
    """V4 sequence TIS, C = 2: products (4, 0.99) -> weights (2, 0.99) on every token; 1 of 2
    truncated; mean weight (2 + 0.99) / 2 = 1.495. With C = 5: (4, 0.99)."""
    w, m = get_method("seq_tis").fn(seq_batch(), HP)
    torch.testing.assert_close(w, torch.tensor([[2.0, 2.0], [0.99, 0.99]], dtype=w.dtype),
                               atol=ATOL, rtol=0)
    assert m["seq_tis/trunc_frac"] == 0.5
    assert m["seq_tis/weight_mean"] == pytest.approx(1.495, abs=ATOL)
    w, _ = get_method("seq_tis").fn(seq_batch(), replace(HP, seq_tis_cap=5.0))
    torch.testing.assert_close(w[:, 0], torch.tensor([4.0, 0.99], dtype=w.dtype), atol=ATOL,
                               rtol=0)


def test_icepop_keeps_the_ratio_inside_the_band():
    """V4 IcePop, band [0.5, 2]: rho = (0.4, 1.25, 2.5) -> weights (0, 1.25, 0): the middle
    token keeps its ratio 1.25 (not 1). 2 of 3 tokens masked; mean weight 1.25 / 3."""
    b = batch(old_p=[[0.08, 0.25, 0.5]], roll_p=[[0.2, 0.2, 0.2]])
    w, m = get_method("icepop").fn(b, HP)
    torch.testing.assert_close(w, torch.tensor([[0.0, 1.25, 0.0]], dtype=w.dtype), atol=ATOL,
                               rtol=0)
    assert m["icepop/mask_frac"] == pytest.approx(2 / 3)
    assert m["icepop/weight_mean"] == pytest.approx(1.25 / 3, abs=ATOL)


def test_token_reject_masks_tokens_outside_band():
    """V4 token rejection, band [0.5, 2]: rho = (0.4, 1.25, 2.5) -> keep only the middle token,
    weight 1."""
    b = batch(old_p=[[0.08, 0.25, 0.5]], roll_p=[[0.2, 0.2, 0.2]])
    w, m = get_method("token_reject").fn(b, HP)
    assert w.tolist() == [[0.0, 1.0, 0.0]]
    assert m["token_reject/mask_frac"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("name", ["tis", "seq_tis", "mis", "icepop"])
def test_importance_weights_are_detached(name):
    """The IS weights are constants on the surrogate (verl and TRL detach them): no graph even
    when the log-probs they come from require grad."""
    b = batch(old_p=[[0.3, 0.6]], roll_p=[[0.3, 0.5]])
    b = replace(b, old_logp=b.old_logp.clone().requires_grad_(True))
    w, _ = get_method(name).fn(b, HP)
    assert not w.requires_grad and w.grad_fn is None


def test_corrections_multiply():
    """rho = (0.5, 3.0): tis (0.5, 2.0) times icepop (0.5, 0) -> (0.25, 0); tis times
    token_reject (1, 0) -> (0.5, 0)."""
    b = batch(old_p=[[0.1, 0.6]], roll_p=[[0.2, 0.2]])
    w, m = correction_weight(parse_methods("tis+icepop"), b, HP)
    torch.testing.assert_close(w, torch.tensor([[0.25, 0.0]], dtype=w.dtype), atol=1e-12, rtol=0)
    assert "tis/weight_mean" in m and "icepop/mask_frac" in m
    w, _ = correction_weight(parse_methods("tis+token_reject"), b, HP)
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.0]], dtype=w.dtype), atol=1e-12, rtol=0)
