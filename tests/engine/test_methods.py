"""The engine's own methods (``tailtheory/engine/methods.py``) and what every method shares.

The losses on batches small enough to check by hand (the expected numbers are worked out in
each test's comments), the check of their hyperparameters, every registered method's metrics,
the batch type's cached ``log_rho``, the config and the CLI. The registry itself is
``tests/engine/test_registry.py``; each section's methods are tested in
``tests/<section>/test_methods.py`` (LOPTI L2, L3; TIM V4; TRM T12; DVP P3; OTB).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from policy_batches import ATOL, HP, batch
from tailtheory.engine.advantages import GRPO_EPS
from tailtheory.engine.methods import aggregate_loss, check_loss_params, clipped_surrogate
from tailtheory.engine.registry import advantages, get_method, parse_methods, registered
from tailtheory.engine.types import MethodParams, PolicyBatch


# ---- losses -----------------------------------------------------------------------------------

def clip_batch():
    # seq 0: ratios 1.0 and (masked) 0.5; seq 1: ratios 1.2 and 1.5; every A = +1.
    return batch(old_p=[[0.5, 0.5], [0.5, 0.2]], logp_p=[[0.5, 0.25], [0.6, 0.3]],
                 adv=[[1.0, 1.0], [1.0, 1.0]], mask=[[1, 0], [1, 1]])


def test_grpo_clipped_token_mean():
    """GRPO: -min(rA, clip(r, 0.8, 1.24) A) per token, mean over the 3 response tokens.

    Tokens: r = 1 -> -1; r = 1.2 -> -1.2; r = 1.5 clips to 1.24 -> -1.24. Loss = -3.44 / 3.
    Gradient w.r.t. logp: -r A / 3 where unclipped, 0 where clipped or masked.
    """
    b = clip_batch()
    logp = b.logp.clone().requires_grad_(True)
    loss, m = get_method("grpo").fn(replace(b, logp=logp), HP)
    assert loss.item() == pytest.approx(-3.44 / 3, abs=ATOL)
    assert m["loss/clipfrac"] == pytest.approx(1 / 3)
    loss.backward()
    expected = torch.tensor([[-1 / 3, 0.0], [-1.2 / 3, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logp.grad, expected, atol=1e-12, rtol=0)


def test_dr_grpo_divides_by_constant():
    """Dr. GRPO: the same token sum divided by B * T_max = 4 (not by the 3 response tokens)."""
    loss, m = get_method("dr_grpo").fn(clip_batch(), HP)
    assert loss.item() == pytest.approx(-3.44 / 4, abs=ATOL)


def test_negative_advantage_is_not_clipped_upward():
    """A < 0 and r > 1 + eps_high: min picks the unclipped -rA (PPO's pessimism), clipfrac 0."""
    b = batch(old_p=[[0.2]], logp_p=[[0.3]], adv=[[-1.0]])                    # r = 1.5
    loss, m = get_method("grpo").fn(b, HP)
    assert loss.item() == pytest.approx(1.5, abs=ATOL) and m["loss/clipfrac"] == 0.0


def test_loss_agg_by_hand():
    """Token losses of clip_batch (-1 | -1.2, -1.24), n = (1, 2), B = 2, T = 2:
    token-mean -3.44 / 3 (today's grpo); seq-mean-token-mean (-1 / 1 + -2.44 / 2) / 2 = -1.11
    (the original GRPO); seq-mean-token-sum-norm -3.44 / (B T) = -3.44 / 4 (today's dr_grpo), or
    -3.44 / (2 * 5) with loss_norm_len = 5."""
    cases = [("token-mean", 0, -3.44 / 3), ("seq-mean-token-mean", 0, -1.11),
             ("seq-mean-token-sum-norm", 0, -3.44 / 4), ("seq-mean-token-sum-norm", 5, -0.344)]
    for agg, norm_len, expected in cases:
        loss, _ = get_method("grpo").fn(clip_batch(), replace(HP, loss_agg=agg,
                                                              loss_norm_len=norm_len))
        assert loss.item() == pytest.approx(expected, abs=ATOL), agg
    loss, _ = get_method("dr_grpo").fn(clip_batch(), replace(HP, loss_norm_len=5))
    assert loss.item() == pytest.approx(-0.344, abs=ATOL)


def test_defaults_keep_the_old_denominators_bitwise():
    """grpo (default loss_agg) divides by the response-token count and dr_grpo by B * T, with the
    same floating-point operations as before loss_agg existed."""
    g = torch.Generator().manual_seed(0)
    b = _random_batch(g, B=5, T=7)
    b = replace(b, weight=torch.rand(5, 7, generator=g, dtype=torch.float64))
    tok, _ = clipped_surrogate(b.logp, b.old_logp, b.adv, HP.eps_low, HP.eps_high)
    x = tok * b.weight * b.mask
    loss, _ = get_method("grpo").fn(b, HP)
    assert loss.item() == (x.sum() / float(b.mask.sum().clamp(min=1))).item()
    loss, _ = get_method("dr_grpo").fn(b, replace(HP, loss_agg="seq-mean-token-mean"))
    assert loss.item() == (x.sum() / float(5 * 7)).item()


def test_rejected_sequence_keeps_its_share_of_the_denominators():
    """TRM's definition: a sequence weighed 0 still counts. clip_batch with seq 1 rejected: only
    seq 0's -1 is left; token-mean -1 / 3 (not -1 / 1), seq-mean-token-mean (-1 + 0) / 2."""
    b = replace(clip_batch(), weight=torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    loss, m = get_method("grpo").fn(b, HP)
    assert loss.item() == pytest.approx(-1 / 3, abs=ATOL) and m["loss/active_frac"] == 1 / 3
    loss, _ = get_method("grpo").fn(b, replace(HP, loss_agg="seq-mean-token-mean"))
    assert loss.item() == pytest.approx(-0.5, abs=ATOL)


def test_dual_clip_by_hand():
    """Dual clip, c = 3, A = -1: r = 4 -> PPO loss max(4, 1.24) = 4, dual min(4, 3) = 3 and no
    gradient; r = 2 -> 2 < 3 untouched (gradient -(-1) r = 2 w.r.t. logp); A = +1, r = 4 ->
    -min(4, 1.24) = -1.24 (the positive side is never dual-clipped). Off (None): 4, 2, -1.24."""
    b = batch(old_p=[[0.1, 0.1, 0.1]], logp_p=[[0.4, 0.2, 0.4]], adv=[[-1.0, -1.0, 1.0]])
    for c, first in ((None, 4.0), (3.0, 3.0)):
        logp = b.logp.clone().requires_grad_(True)
        tok, _ = clipped_surrogate(logp, b.old_logp, b.adv, HP.eps_low, HP.eps_high, c)
        torch.testing.assert_close(tok, torch.tensor([[first, 2.0, -1.24]], dtype=tok.dtype),
                                   atol=ATOL, rtol=0)
        tok.sum().backward()
        assert logp.grad[0, 0].item() == pytest.approx(4.0 if c is None else 0.0, abs=ATOL)
        assert logp.grad[0, 1].item() == pytest.approx(2.0, abs=ATOL)
    loss, _ = get_method("grpo").fn(b, replace(HP, clip_ratio_c=3.0))
    assert loss.item() == pytest.approx((3.0 + 2.0 - 1.24) / 3, abs=ATOL)


def test_bad_loss_options_raise():
    with pytest.raises(ValueError, match="unknown loss_agg 'seq-mean'; valid: token-mean, "
                                         "seq-mean-token-mean, seq-mean-token-sum-norm"):
        get_method("grpo").fn(clip_batch(), replace(HP, loss_agg="seq-mean"))
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        get_method("grpo").fn(clip_batch(), replace(HP, clip_ratio_c=1.0))
    with pytest.raises(ValueError, match="loss_norm_len must be >= 0"):
        aggregate_loss(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool),
                       "seq-mean-token-sum-norm", -1)


@pytest.mark.parametrize("kw, message", [
    (dict(eps_low=1.0), r"need 0 < eps_low < 1 and eps_high > 0, got 1.0, 0.24"),
    (dict(eps_high=0.0), "need 0 < eps_low < 1 and eps_high > 0"),
    (dict(loss_agg="x"), "unknown loss_agg 'x'; valid: token-mean"),
    (dict(loss_norm_len=-1), "loss_norm_len must be >= 0"),
    (dict(loss_norm_len=1.5), "loss_norm_len must be an integer"),
    (dict(clip_ratio_c=float("inf")), "clip_ratio_c must be a finite number > 1"),
])
def test_check_loss_params(kw, message):
    """The losses' own check (clip range, aggregation, dual clip), declared with grpo and
    dr_grpo; the defaults pass."""
    check_loss_params(HP)
    with pytest.raises(ValueError, match=message):
        check_loss_params(replace(HP, **kw))


def _random_batch(g: torch.Generator, B: int, T: int) -> PolicyBatch:
    """Random log-probs, advantages of both signs, ragged masks (each row >= 1 token)."""
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    logp = old + 0.6 * torch.randn(B, T, generator=g, dtype=torch.float64)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lens[:, None]
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, T).clone()
    return PolicyBatch(logp=logp, old_logp=old, roll_logp=old.clone(), mask=mask, adv=adv)


def _loop_loss(b: PolicyBatch, hp: MethodParams, agg: str) -> float:
    """The loss from its definition, one token at a time in plain Python (the slow reference)."""
    B, T = b.mask.shape
    tok = [[0.0] * T for _ in range(B)]
    for i in range(B):
        for t in range(T):
            active = bool(b.mask[i, t]) and (b.active is None or bool(b.active[i, t]))
            w = 1.0 if b.weight is None else float(b.weight[i, t])
            if not active or w == 0:
                continue
            r, a = math.exp(float(b.logp[i, t] - b.old_logp[i, t])), float(b.adv[i, t])
            clipped = min(max(r, 1 - hp.eps_low), 1 + hp.eps_high)
            loss = max(-r * a, -clipped * a)                      # -min(rA, clip(r) A)
            if hp.clip_ratio_c is not None and a < 0:
                loss = min(loss, -hp.clip_ratio_c * a)
            tok[i][t] = w * loss
    n = [int(b.mask[i].sum()) for i in range(B)]
    if agg == "token-mean":
        return sum(map(sum, tok)) / sum(n)
    if agg == "seq-mean-token-mean":
        return sum(sum(tok[i]) / n[i] for i in range(B)) / B
    return sum(map(sum, tok)) / (B * (hp.loss_norm_len or T))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("clip_ratio_c", [None, 1.5])
@pytest.mark.parametrize("seed", range(3))
def test_loss_matches_loop_reference(agg, clip_ratio_c, seed):
    """Vectorised loss == the loop over tokens, with correction weights (some 0), a Lopti-style
    active subset, ragged masks, both advantage signs, every aggregation, dual clip on and off."""
    g = torch.Generator().manual_seed(seed)
    b = _random_batch(g, B=6, T=5)
    weight = torch.rand(6, 5, generator=g, dtype=torch.float64) * 2
    weight[torch.rand(6, 5, generator=g) < 0.2] = 0.0
    weight[1] = 0.0                                                      # a rejected sequence
    active = torch.rand(6, 5, generator=g) < 0.7
    b = replace(b, weight=weight, active=active)
    hp = replace(HP, loss_agg=agg, clip_ratio_c=clip_ratio_c, loss_norm_len=3 * seed)
    loss, _ = get_method("grpo").fn(b, hp)
    assert loss.item() == pytest.approx(_loop_loss(b, hp, agg), abs=1e-12)
    if agg == "seq-mean-token-sum-norm":
        loss, _ = get_method("dr_grpo").fn(b, replace(hp, loss_agg="token-mean"))
        assert loss.item() == pytest.approx(_loop_loss(b, hp, agg), abs=1e-12)


def test_group_advantages_grpo_and_dr_grpo():
    """Rewards (1, 0, 0, 0) in one group: mean 0.25, unbiased std 0.5 -> GRPO A = (1.5, -0.5 x3)
    (with the std's eps);
    Dr. GRPO A = (0.75, -0.25 x3), at every response token only."""
    b = batch(old_p=[[0.5, 0.5]] * 4, mask=[[1, 1], [1, 0], [1, 1], [1, 1]],
              rewards=torch.tensor([1.0, 0, 0, 0]), group_ids=torch.zeros(4, dtype=torch.long))
    adv, _ = advantages(parse_methods("grpo"), b, HP)
    sd = 0.5 + GRPO_EPS
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.75, -0.25, -0.25, -0.25],
                                                       dtype=adv.dtype) / sd, atol=1e-12, rtol=0)
    assert adv[1, 1] == 0
    adv, _ = advantages(parse_methods("dr_grpo"), b, HP)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.75, -0.25, -0.25, -0.25],
                                                       dtype=adv.dtype), atol=1e-12, rtol=0)


# ---- every method ------------------------------------------------------------------------------

def test_every_method_registered_with_namespaced_metrics():
    """Each method returns (value, metrics) with 'namespace/key' metric names."""
    expected = {"grpo", "dr_grpo", "ar", "lopti", "lopti_reversed", "dvp", "trm", "otb", "tis",
                "seq_tis", "mis", "icepop", "token_reject", "seq_reject", "geo_reject",
                "upweight", "top_entropy", "random_tokens"}
    assert set(registered()) == expected
    z = torch.tensor([[[0.0, -1.0], [0.5, 0.0]]] * 2, dtype=torch.float64)
    b = batch(old_p=[[0.3, 0.6], [0.5, 0.2]], roll_p=[[0.3, 0.5], [0.4, 0.2]],
              adv=[[1.0, 1.0], [-1.0, -1.0]], rewards=torch.tensor([1.0, 0.0]),
              group_ids=torch.tensor([0, 0]), sum_p2=torch.full((2, 2), 0.5),
              tok_kl=torch.full((2, 2), 0.01), logits=z, tokens=torch.zeros(2, 2).long(),
              entropy=torch.full((2, 2), 0.7), seed=0, step=0)
    for name, method in registered().items():
        value, metrics = method.fn(b, HP)
        assert value is not None and metrics, name
        assert set(metrics) <= set(method.metrics), (name, list(metrics))  # declared keys
        if method.advantage is not None:  # a loss also declares its group advantage's keys
            metrics = {**metrics, **method.advantage(b, HP)[1]}
        assert set(metrics) == set(method.metrics), (name, list(metrics))


def test_corrections_see_mismatch_under_bypass():
    """V3/V4: every correction (TRM k2k3) weighs by pi_train / pi_roll, so bypass (pi_old =
    pi_roll) gives the same correction weights as recompute (pi_old = pi_train), not all ones."""
    train_p = [[0.1, 0.6, 0.5], [0.5 * math.exp(0.5), 0.5, 0.5]]
    roll_p = [[0.2, 0.2, 0.5], [0.5, 0.5, 0.2]]
    hp = replace(HP, trm_estimator="k2k3")
    recompute = batch(old_p=train_p, roll_p=roll_p)
    recompute = replace(recompute, train_logp=recompute.old_logp)
    bypass = replace(recompute, old_logp=recompute.roll_logp)
    assert torch.equal(bypass.log_rho, recompute.log_rho) and bypass.log_rho.abs().max() > 0.4
    for name in ("tis", "seq_tis", "mis", "icepop", "token_reject", "seq_reject", "geo_reject",
                 "trm"):
        w_rec, m_rec = get_method(name).fn(recompute, hp)
        w_byp, m_byp = get_method(name).fn(bypass, hp)
        assert torch.equal(w_rec, w_byp) and m_rec == m_byp, name
        assert (w_byp != 1).any(), name  # the mismatch is large enough for every method to act
    legacy = batch(old_p=train_p, roll_p=roll_p)  # no train_logp: old_logp stands for pi_train
    assert torch.equal(legacy.log_rho, recompute.log_rho)


def test_log_rho_is_computed_once_per_batch():
    """``log_rho`` is cached on the batch; ``replace`` makes a new batch with its own."""
    b = batch(old_p=[[0.1, 0.6]], roll_p=[[0.2, 0.2]])
    assert b.log_rho is b.log_rho
    b2 = replace(b, roll_logp=b.old_logp)
    assert torch.equal(b2.log_rho, torch.zeros_like(b2.log_rho))


# ---- the config and the CLI --------------------------------------------------------------------

def test_cli_lists_new_methods_and_flags(capsys):
    """``tailtheory methods`` lists the remedies; ``train --help`` shows each new flag with its
    default."""
    from tailtheory.cli import main

    assert main(["methods"]) == 0
    text = "\n" + capsys.readouterr().out
    for name in ("seq_tis", "mis", "icepop", "token_reject", "seq_reject", "geo_reject"):
        assert f"\n{name} " in text, name
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, default in (("--loss-agg", "token-mean"), ("--loss-norm-len", "0"),
                          ("--clip-ratio-c", "None"), ("--seq-tis-cap", "2.0"),
                          ("--geo-low", "0.999"), ("--geo-high", "1.001")):
        assert flag in text and f"(default: {default})" in text.split(flag, 2)[-1], flag


def test_cli_parses_clip_ratio_c():
    """``--clip-ratio-c 3`` is 3.0; ``none`` / ``off`` (and no flag) keep it off."""
    import argparse

    from tailtheory.engine.config import add_config_arguments

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert parser.parse_args([]).clip_ratio_c is None
    assert parser.parse_args(["--clip-ratio-c", "3"]).clip_ratio_c == 3.0
    assert parser.parse_args(["--clip-ratio-c", "off"]).clip_ratio_c is None
    assert parser.parse_args(["--clip-ratio-c", "None"]).clip_ratio_c is None


@pytest.mark.parametrize("kw, message", [
    (dict(loss_agg="seq-mean"), "unknown loss_agg 'seq-mean'; valid: token-mean, "
                                "seq-mean-token-mean, seq-mean-token-sum-norm"),
    (dict(loss_norm_len=-1), "loss_norm_len must be >= 0"),
    (dict(clip_ratio_c=1.0), "clip_ratio_c must be a finite number > 1"),
    (dict(clip_ratio_c=float("nan")), "clip_ratio_c must be a finite number > 1"),
    (dict(seq_tis_cap=0.0), "seq_tis_cap must be > 0"),
    (dict(geo_low=1.001, geo_high=0.999), "need 0 <= geo_low < geo_high"),
    (dict(geo_low=1.0, geo_high=1.0), "need 0 <= geo_low < geo_high"),
    (dict(mis_low=2.0, mis_high=2.0), "need 0 <= mis_low < mis_high"),
    (dict(method="dr_grpo", loss_agg="seq-mean-token-mean"), "dr_grpo loss aggregates"),
])
def test_config_rejects_bad_remedy_options(kw, message):
    """The config checks every new option once, when it is built."""
    from tailtheory.engine.config import TrainConfig

    with pytest.raises(ValueError, match=message):
        TrainConfig(model="tiny", **kw)
    assert TrainConfig(model="tiny", method="dr_grpo",
                       loss_agg="seq-mean-token-sum-norm").spec.loss.name == "dr_grpo"
