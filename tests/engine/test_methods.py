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
from tailtheory.engine.methods import trm_sampled_keep
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


def test_mis_product_and_geometric():
    """V4 sequence masking, band [0.5, 2]: seq 0 has r = (2, 2): product 4 -> rejected, geometric
    mean 2 -> kept; seq 1 has r = (0.9, 1.1): product 0.99 -> kept either way."""
    b = batch(old_p=[[0.4, 0.4], [0.18, 0.22]], roll_p=[[0.2, 0.2], [0.2, 0.2]])
    w, m = get_method("mis").fn(b, HP)
    assert w.tolist() == [[0.0, 0.0], [1.0, 1.0]] and m["mis/reject_rate"] == 0.5
    w, _ = get_method("mis").fn(b, replace(HP, mis_geometric=True))
    assert w.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_icepop_masks_tokens_outside_band():
    """V4 IcePop, band [0.5, 2]: r = (0.4, 1.0, 2.5) -> keep only the middle token."""
    b = batch(old_p=[[0.08, 0.2, 0.5]], roll_p=[[0.2, 0.2, 0.2]])
    w, m = get_method("icepop").fn(b, HP)
    assert w.tolist() == [[0.0, 1.0, 0.0]]
    assert m["icepop/mask_frac"] == pytest.approx(2 / 3)


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
    """tis + icepop: weights (0.5, 2.0) times keep (1, 0) with r = (0.5, 3.0) -> (0.5, 0)."""
    b = batch(old_p=[[0.1, 0.6]], roll_p=[[0.2, 0.2]])
    w, m = correction_weight(parse_methods("tis+icepop"), b, HP)
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.0]], dtype=w.dtype), atol=1e-12, rtol=0)
    assert "tis/weight_mean" in m and "icepop/mask_frac" in m


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
                "mis", "icepop"}
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
    """V3/V4: TIS, MIS, IcePop and TRM (k2k3) weigh by pi_train / pi_roll, so bypass (pi_old =
    pi_roll) gives the same correction weights as recompute (pi_old = pi_train), not all ones."""
    train_p = [[0.1, 0.6, 0.5], [0.5 * math.exp(0.5), 0.5, 0.5]]
    roll_p = [[0.2, 0.2, 0.5], [0.5, 0.5, 0.2]]
    hp = replace(HP, trm_estimator="k2k3")
    recompute = batch(old_p=train_p, roll_p=roll_p)
    recompute = replace(recompute, train_logp=recompute.old_logp)
    bypass = replace(recompute, old_logp=recompute.roll_logp)
    assert torch.equal(bypass.log_rho, recompute.log_rho) and bypass.log_rho.abs().max() > 0.4
    for name in ("tis", "mis", "icepop", "trm"):
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
