"""DVP's method of the GRPO engine (``tailtheory/pruning/methods.py``, P3): the sampler's kept
set used by the trainer, its registration and the check of its rule and threshold."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from policy_batches import ATOL, HP, batch
from tailtheory.engine.registry import get_method, registered
from tailtheory.pruning import methods as pm


def test_registered_at_the_vocab_stage_with_its_check():
    m = registered()["dvp"]
    assert (m.stage, m.metrics, m.validate) == ("vocab", ("dvp/kept_vocab",), pm.check_dvp)
    assert m.fn.__module__ == "tailtheory.pruning.methods"


@pytest.mark.parametrize("kw, message", [
    (dict(dvp_rule="nucleus"), r"dvp_rule must be one of \('min_p', 'top_p', 'absolute'\)"),
    (dict(dvp_rho=1.0), r"dvp_rho must lie in \(0, 1\), got 1.0: rule 'min_p'"),
    (dict(dvp_rho=0.0), "dvp_rho must lie in"),
])
def test_bad_rule_or_threshold_raises_whatever_the_method(kw, message):
    from tailtheory.engine.config import TrainConfig

    with pytest.raises(ValueError, match=message):
        TrainConfig(model="tiny", method="grpo", **kw)
    with pytest.raises(ValueError, match=message):
        pm.check_dvp(replace(HP, **kw))


def test_dvp_needs_a_kept_set_or_logits():
    with pytest.raises(ValueError, match="kept set or the rollout logits"):
        get_method("dvp").fn(batch(old_p=[[0.5]]), HP)


def test_dvp_keeps_sampler_set_and_renormalises():
    """P3: logits (0, -1, -20), min-p rho = 1e-6: p3 / p1 = e^-20 ~ 2e-9 < rho, so S = {0, 1};
    the trainer's log-prob of token 0 is log 1 / (1 + e^-1), its pruned mass e^-20 / Z."""
    from tailtheory.core.stats import token_stats

    z = torch.tensor([[[0.0, -1.0, -20.0]]], dtype=torch.float64)
    tok = torch.tensor([[0]])
    b = batch(old_p=[[0.5]], logits=z, tokens=tok)
    keep, m = get_method("dvp").fn(b, HP)
    assert keep.tolist() == [[[True, True, False]]] and m["dvp/kept_vocab"] == 2.0
    st = token_stats(z, tok, keep=keep)
    assert st["logp"].item() == pytest.approx(-math.log1p(math.exp(-1)), abs=ATOL)
    Z = 1 + math.exp(-1) + math.exp(-20)
    assert st["pruned_mass"].item() == pytest.approx(math.exp(-20) / Z, rel=1e-9)
