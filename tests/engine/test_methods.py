"""The method registry (``tailtheory/engine/types.py``, ``registry.py``, ``methods.py``).

One test per method on a batch small enough to check by hand; the expected numbers are worked
out in each test's comments. Claims: LOPTI L2 (AR), L3 (Lopti), TRM T12, DVP P3, TIM V4, OTB.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tailtheory.engine import registry
from tailtheory.engine.methods import aggregate_loss, clipped_surrogate, trm_sampled_keep
from tailtheory.engine.registry import (advantages, correction_weight, get_method, parse_methods,
                                        passes, register, registered)
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.otb.baselines import GRPO_EPS

HP = MethodParams()
ATOL = 1e-12


def batch(old_p, logp_p=None, adv=None, mask=None, roll_p=None, **kw) -> PolicyBatch:
    """A PolicyBatch from probabilities (easier to check by hand than log-probs)."""
    old = torch.tensor(old_p, dtype=torch.float64).log()
    logp = old.clone() if logp_p is None else torch.tensor(logp_p, dtype=torch.float64).log()
    roll = old.clone() if roll_p is None else torch.tensor(roll_p, dtype=torch.float64).log()
    m = torch.ones_like(old, dtype=torch.bool) if mask is None else torch.tensor(mask).bool()
    a = None if adv is None else torch.tensor(adv, dtype=torch.float64)
    return PolicyBatch(logp=logp, old_logp=old, roll_logp=roll, mask=m, adv=a, **kw)


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


def test_otb_advantage_by_hand():
    """OTB: w = 1 - 2 pi + sum p^2: (1 - 1 + 0.5) = 0.5 and (1 - 0.5 + 0.375) = 0.875;
    B* = (1 * 0.5 + 0 * 0.875) / 1.375 = 4/11; A = (1 - 4/11, -4/11)."""
    b = batch(old_p=[[0.5], [0.25]], rewards=torch.tensor([1.0, 0.0]),
              group_ids=torch.tensor([0, 0]), sum_p2=torch.tensor([[0.5], [0.375]]))
    adv, _ = advantages(parse_methods("otb"), b, HP)
    torch.testing.assert_close(adv, torch.tensor([[7 / 11], [-4 / 11]], dtype=adv.dtype),
                               atol=1e-6, rtol=0)


def test_otb_under_bypass_pairs_sum_p2_with_the_trainer_logp():
    """Under bypass old_logp is the rollout's; the energy must use the trainer's log-probs, whose
    distribution sum_p2 describes: same advantages as recompute, no range error from pi_roll."""
    kw = dict(rewards=torch.tensor([1.0, 0.0]), group_ids=torch.tensor([0, 0]),
              sum_p2=torch.tensor([[0.5], [0.375]]))
    train = torch.tensor([[0.5], [0.25]], dtype=torch.float64).log()
    recompute = batch(old_p=[[0.5], [0.25]], **kw)
    # rollout put 0.9 on the first token: 0.81 > the trainer's sum p^2 of 0.5
    bypass = batch(old_p=[[0.9], [0.25]], roll_p=[[0.9], [0.25]], train_logp=train, **kw)
    a_re, _ = advantages(parse_methods("otb"), recompute, HP)
    a_by, _ = advantages(parse_methods("otb"), bypass, HP)
    torch.testing.assert_close(a_by, a_re, atol=ATOL, rtol=0)


# ---- advantage reweighting and Lopti ----------------------------------------------------------

def test_ar_reweights_both_signs_detached():
    """L2: alpha = 0.3, pi_old = (0.5, 0.1): scales 0.85 and 0.73; A = (2, -2) -> (1.7, -1.46)."""
    b = batch(old_p=[[0.5, 0.1]], adv=[[2.0, -2.0]])
    b = replace(b, old_logp=b.old_logp.clone().requires_grad_(True))
    adv, m = get_method("ar").fn(b, HP)
    torch.testing.assert_close(adv, torch.tensor([[1.7, -1.46]], dtype=adv.dtype), atol=1e-12,
                               rtol=0)
    assert not adv.requires_grad  # pi_old is detached
    adv0, _ = get_method("ar").fn(b, replace(HP, alpha=0.0))
    torch.testing.assert_close(adv0, b.adv)  # alpha = 0 is plain GRPO


def test_lopti_groups_and_order():
    """L3: pi_old = (0.2, 0.7 | 0.5, 0.4), eta = 0.5: low = {0.2, 0.4} (0.5 is not < 0.5)."""
    b = batch(old_p=[[0.2, 0.7], [0.5, 0.4]])
    groups, m = get_method("lopti").fn(b, HP)
    assert [g[0] for g in groups] == ["low", "high"]
    assert groups[0][1].tolist() == [[True, False], [False, True]]
    assert groups[1][1].tolist() == [[False, True], [True, False]]
    assert m["lopti/low_frac"] == 0.5
    rev, _ = get_method("lopti_reversed").fn(b, HP)
    assert [g[0] for g in rev] == ["high", "low"]


def _run_schedule(method: str) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Lopti on a bandit: one shared logit vector z (V = 3) for every token, SGD, the grpo loss.

    Shared parameters make the second pass see the first pass's update (as in a real network).
    Returns the active mask of each pass and the final logits.
    """
    z = torch.tensor([2.0, 0.0, -1.0], dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([[0, 1, 2, 0]])                               # (B=1, T=4)
    mask = torch.ones(1, 4, dtype=torch.bool)
    old = torch.log_softmax(z.detach(), -1)[tokens]                     # pi_old fixed
    b = PolicyBatch(logp=old, old_logp=old, roll_logp=old, mask=mask,
                    adv=torch.tensor([[1.0, 1.0, -1.0, 1.0]], dtype=torch.float64))
    spec, hp = parse_methods(method), replace(HP, eta=0.5)
    groups, _ = passes(spec, b, hp)
    opt = torch.optim.SGD([z], lr=1.0)
    seen = []
    for _, active in groups:
        opt.zero_grad()
        logp = torch.log_softmax(z, -1)[tokens]                        # recomputed per pass
        loss, m = spec.loss.fn(replace(b, logp=logp, active=active), hp)
        if seen:  # the second pass sees the moved policy against the SAME pi_old
            assert m["loss/approx_kl"] > 0
        else:     # first pass: ratio 1, loss = -sum(A over active) / 4 (all response tokens)
            assert loss.item() == pytest.approx(-float((b.adv * active).sum()) / 4, abs=ATOL)
        loss.backward()
        opt.step()
        seen.append(active)
    return seen, z.detach()


def test_lopti_updates_low_group_first_and_order_matters():
    """L3: pi_old = softmax(2, 0, -1) = (.84, .11, .04): tokens 1, 2 (low) go first under lopti,
    last under lopti_reversed; the final policies differ."""
    low_first, z_low = _run_schedule("lopti")
    high_first, z_high = _run_schedule("lopti_reversed")
    assert low_first[0].tolist() == [[False, True, True, False]]
    assert high_first[0].tolist() == [[True, False, False, True]]
    assert (z_low - z_high).abs().max() > 1e-3


# ---- mismatch corrections ----------------------------------------------------------------------

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


def test_corrections_multiply():
    """rho = (0.5, 3.0): tis (0.5, 2.0) times icepop (0.5, 0) -> (0.25, 0); tis times
    token_reject (1, 0) -> (0.5, 0)."""
    b = batch(old_p=[[0.1, 0.6]], roll_p=[[0.2, 0.2]])
    w, m = correction_weight(parse_methods("tis+icepop"), b, HP)
    torch.testing.assert_close(w, torch.tensor([[0.25, 0.0]], dtype=w.dtype), atol=1e-12, rtol=0)
    assert "tis/weight_mean" in m and "icepop/mask_frac" in m
    w, _ = correction_weight(parse_methods("tis+token_reject"), b, HP)
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.0]], dtype=w.dtype), atol=1e-12, rtol=0)


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


# ---- the registry ------------------------------------------------------------------------------

def test_parse_methods_composes_and_rejects():
    spec = parse_methods("ar+lopti")
    assert spec.loss.name == "grpo" and spec.reweight.name == "ar"
    assert spec.schedule.name == "lopti" and spec.label == "grpo+ar+lopti"
    assert [m.name for m in parse_methods(["tis", "mis", "trm"]).corrections] == \
        ["tis", "mis", "trm"]
    assert parse_methods("dr_grpo+trm").loss.name == "dr_grpo"
    with pytest.raises(ValueError, match="valid methods: ar, dr_grpo, dvp"):
        parse_methods("ar+foo")
    for bad in ("lopti+lopti_reversed", "grpo+dr_grpo", "ar+ar", "ar+", ""):
        with pytest.raises(ValueError):
            parse_methods(bad)


def test_every_method_registered_with_namespaced_metrics():
    """Each method returns (value, metrics) with 'namespace/key' metric names."""
    expected = {"grpo", "dr_grpo", "ar", "lopti", "lopti_reversed", "dvp", "trm", "otb", "tis",
                "seq_tis", "mis", "icepop", "token_reject", "seq_reject", "geo_reject"}
    assert set(registered()) == expected
    z = torch.tensor([[[0.0, -1.0], [0.5, 0.0]]] * 2, dtype=torch.float64)
    b = batch(old_p=[[0.3, 0.6], [0.5, 0.2]], roll_p=[[0.3, 0.5], [0.4, 0.2]],
              adv=[[1.0, 1.0], [-1.0, -1.0]], rewards=torch.tensor([1.0, 0.0]),
              group_ids=torch.tensor([0, 0]), sum_p2=torch.full((2, 2), 0.5),
              tok_kl=torch.full((2, 2), 0.01), logits=z, tokens=torch.zeros(2, 2).long())
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


def test_trm_correction_metric_does_not_clash_with_monitor():
    """The trm correction reports trm/kept_frac; trm/accept_rate belongs to the trainer's
    monitor, which every metrics line carries."""
    b = batch(old_p=[[0.5, 0.5]], tok_kl=torch.zeros(1, 2, dtype=torch.float64))
    _, m = get_method("trm").fn(b, HP)
    assert set(m) == {"trm/kept_frac"}


# ---- the registry's rules ---------------------------------------------------------------------

def test_register_refuses_an_existing_name():
    """Two methods never share a name: registering ``tis`` again raises, the first one stays."""
    before = get_method("tis")
    with pytest.raises(ValueError, match="'tis' is already registered"):
        register("tis", "correction", "test")(lambda b, hp: (None, {}))
    assert get_method("tis") is before


def test_unknown_method_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown method 'nope'; valid methods: ar, dr_grpo, dvp"):
        get_method("nope")


def test_registry_never_imports_the_methods():
    """No import cycle: the registry module does not import ``engine/methods.py`` at import time
    (its lookups import it lazily)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(registry))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "tailtheory.engine.methods" not in imported
    assert not any(m and m.startswith("tailtheory.engine.methods") for m in imported)


def test_log_rho_is_computed_once_per_batch():
    """``log_rho`` is cached on the batch; ``replace`` makes a new batch with its own."""
    b = batch(old_p=[[0.1, 0.6]], roll_p=[[0.2, 0.2]])
    assert b.log_rho is b.log_rho
    b2 = replace(b, roll_logp=b.old_logp)
    assert torch.equal(b2.log_rho, torch.zeros_like(b2.log_rho))


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
