"""The field's opposite claims as engine methods (``tailtheory/lopti/opposite.py``, registered in
``tailtheory/lopti/methods.py``): ``upweight`` (L7, arXiv 2603.22117), ``top_entropy`` (L8,
arXiv 2506.01939) and ``random_tokens`` (L9, arXiv 2605.07660) on batches small enough to check
by hand, the loss's normalisation by every response token, the checks of their
hyperparameters, and one GRPO step of each on the tiny model."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from policy_batches import ATOL, HP, batch
from tailtheory.engine.registry import correction_weight, get_method, parse_methods, registered
from tailtheory.lopti import methods as lm
from tailtheory.lopti import opposite as op
from tailtheory.lopti.reweight import pi_old_reweight


def test_registered_at_their_stages_with_their_checks():
    want = {"upweight": ("reweight", ("upweight/scale_mean",), lm.check_upweight_c),
            "top_entropy": ("correction", ("top_entropy/kept_frac", "top_entropy/threshold"),
                            lm.check_token_fraction),
            "random_tokens": ("correction", ("random_tokens/kept_frac",),
                              lm.check_token_fraction)}
    for name, (stage, metrics, check) in want.items():
        m = registered()[name]
        assert (m.stage, m.metrics, m.validate) == (stage, metrics, check), name
        assert m.fn.__module__ == "tailtheory.lopti.methods"
    assert (HP.upweight_c, HP.token_fraction) == (0.2, 0.2)
    with pytest.raises(ValueError, match="at most one reweight"):
        parse_methods("ar+upweight")


# ---- upweight (L7) -----------------------------------------------------------------------------

def test_upweight_multiplies_by_one_plus_c_minus_c_pi_old_detached():
    """c = 0.2, pi_old = (0.5, 0.1): factors 1 + 0.2 - 0.1 = 1.1 and 1 + 0.2 - 0.02 = 1.18;
    A = (2, -2) -> (2.2, -2.36): the low-probability token weighs more, for both signs."""
    b = batch(old_p=[[0.5, 0.1]], adv=[[2.0, -2.0]])
    b = replace(b, old_logp=b.old_logp.clone().requires_grad_(True))
    adv, m = get_method("upweight").fn(b, HP)
    torch.testing.assert_close(adv, torch.tensor([[2.2, -2.36]], dtype=adv.dtype), atol=1e-12,
                               rtol=0)
    assert not adv.requires_grad
    assert m["upweight/scale_mean"] == pytest.approx((1.1 + 1.18) / 2, abs=ATOL)
    adv0, _ = get_method("upweight").fn(b, replace(HP, upweight_c=0.0))
    torch.testing.assert_close(adv0, b.adv)                       # c = 0 is plain GRPO
    torch.testing.assert_close(adv, pi_old_reweight(b.adv, b.old_logp, -0.2))  # AR at -c


# ---- how many tokens a fraction keeps ------------------------------------------------------------

@pytest.mark.parametrize("n, k", [(0, 0), (1, 1), (4, 1), (5, 1), (10, 2), (11, 3), (15, 3),
                                  (100, 20), (101, 21)])
def test_kept_count_is_the_ceiling_of_a_fifth(n, k):
    assert op.kept_count(n, 0.2) == k


# ---- top_entropy (L8) --------------------------------------------------------------------------

ENTROPY = [[0.1, 0.9, 0.3, 0.9, 0.5],
           [0.9, 0.2, 5.0, 0.4, 0.6]]
MASK = [[1, 1, 1, 1, 1],
        [1, 1, 0, 1, 1]]   # 9 response tokens; the padded 5.0 is never a candidate


def test_top_entropy_keeps_the_highest_and_breaks_ties_by_position():
    """9 tokens, fraction 0.2: k = ceil(1.8) = 2 of the three tied 0.9s, the first two in
    row-major order ((0, 1) and (0, 3)); threshold 0.9. Fraction 0.5: k = 5, the three 0.9s,
    then 0.6 and 0.5; threshold 0.5."""
    h, m = torch.tensor(ENTROPY), torch.tensor(MASK).bool()
    keep, tau = op.top_entropy_mask(h, m, 0.2)
    assert keep.nonzero().tolist() == [[0, 1], [0, 3]] and tau == pytest.approx(0.9)
    keep, tau = op.top_entropy_mask(h, m, 0.5)
    assert keep.nonzero().tolist() == [[0, 1], [0, 3], [0, 4], [1, 0], [1, 4]]
    assert tau == pytest.approx(0.5)
    assert not (keep & ~m).any()
    keep, tau = op.top_entropy_mask(h, torch.zeros_like(m), 0.2)   # no response token
    assert not keep.any() and tau != tau


def test_top_entropy_method_weighs_kept_one_others_zero_and_needs_the_entropy():
    b = batch(old_p=[[0.5] * 5] * 2, mask=MASK, entropy=torch.tensor(ENTROPY))
    w, m = get_method("top_entropy").fn(b, HP)
    assert w.tolist() == [[0, 1, 0, 1, 0], [0, 0, 0, 0, 0]] and w.dtype == b.old_logp.dtype
    assert m == {"top_entropy/kept_frac": pytest.approx(2 / 9), "top_entropy/threshold":
                 pytest.approx(0.9)}
    with pytest.raises(ValueError, match="needs the pi_old forward's per-token entropy"):
        get_method("top_entropy").fn(replace(b, entropy=None), HP)
    with pytest.raises(ValueError, match="entropy"):
        get_method("top_entropy").fn(replace(b, entropy=torch.full((2, 5), float("nan"))), HP)


# ---- random_tokens (L9) ------------------------------------------------------------------------

def _mask(B=8, T=13):
    m = torch.ones(B, T, dtype=torch.bool)
    m[::2, 9:] = False                                            # 4 rows end early: n = 88
    return m


def test_random_tokens_count_determinism_and_change_across_steps_and_seeds():
    m = _mask()
    n = int(m.sum())
    keep = op.random_token_mask(m, 0.2, seed=3, step=7)
    assert int(keep.sum()) == op.kept_count(n, 0.2) == 18 and not (keep & ~m).any()
    assert torch.equal(keep, op.random_token_mask(m.clone(), 0.2, seed=3, step=7))
    others = [op.random_token_mask(m, 0.2, seed=3, step=8),
              op.random_token_mask(m, 0.2, seed=4, step=7)]
    assert all(not torch.equal(keep, o) and int(o.sum()) == 18 for o in others)
    assert op.token_mask_seed(3, 7) == op.TOKEN_MASK_SEED + 300_007


def test_random_tokens_method_and_its_seed():
    b = replace(batch(old_p=torch.full((8, 13), 0.5).tolist()), mask=_mask(), seed=1, step=0)
    w, m = get_method("random_tokens").fn(b, HP)
    assert set(w.unique().tolist()) == {0.0, 1.0} and m["random_tokens/kept_frac"] == 18 / 88
    assert torch.equal(w.bool(), op.random_token_mask(b.mask, 0.2, 1, 0))
    with pytest.raises(ValueError, match="needs the run's seed and the step"):
        get_method("random_tokens").fn(replace(b, step=None), HP)


# ---- the normalisation: every response token, kept or not -------------------------------------

@pytest.mark.parametrize("method", ["top_entropy", "random_tokens"])
def test_the_loss_divides_by_all_response_tokens_not_the_kept_ones(method):
    """Ratio 1 everywhere, so a token's loss is -A: the grpo loss under the method's weights is
    -(sum of A over the kept tokens) / 9 (all response tokens), not / 2 (the kept ones, 4.5x
    larger); the clip and KL metrics average over the kept tokens only."""
    adv = [[1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0]]
    b = batch(old_p=[[0.5] * 5] * 2, mask=MASK, adv=adv, entropy=torch.tensor(ENTROPY), seed=0,
              step=0)
    w, _ = correction_weight(parse_methods(method), b, HP)
    loss, m = get_method("grpo").fn(replace(b, weight=w), HP)
    kept = w.bool()
    assert int(kept.sum()) == 2
    want = -float((b.adv * kept).sum()) / 9
    assert loss.item() == pytest.approx(want, abs=ATOL)
    assert m["loss/active_frac"] == pytest.approx(2 / 9)
    full, _ = get_method("grpo").fn(b, HP)                        # GRPO: every token, / 9
    assert full.item() == pytest.approx(-float((b.adv * b.mask).sum()) / 9, abs=ATOL)


# ---- one GRPO step of each on the tiny model -------------------------------------------------

def test_one_grpo_step_of_each_method_on_the_tiny_model(tmp_path):
    """The trainer hands the methods the pi_old forward's entropy, the seed and the step: each
    runs, keeps ceil(0.2 n) of the step's tokens (upweight: scales in [1, 1.2]) and logs the keys
    it declared."""
    from tailtheory.engine.checkpoint import read_metrics
    from tailtheory.engine.config import TrainConfig
    from tailtheory.engine.step_metrics import METRIC_KEYS
    from tailtheory.engine.trainer import train
    from tests.engine.test_trainer import SMALL, DenseKK

    for method in ("upweight", "top_entropy", "random_tokens"):
        cfg = TrainConfig(**SMALL, method=method, steps=1, out=str(tmp_path / method))
        train(cfg, progress=False, task=DenseKK())
        (line,) = read_metrics(cfg.out)
        assert set(line) == set(METRIC_KEYS) | cfg.spec.metric_keys, method
        if method == "upweight":
            assert 1.0 <= line["upweight/scale_mean"] <= 1.2
        else:
            frac = line[f"{method}/kept_frac"]
            assert 0.2 <= frac < 0.2 + 1 / 4 and line["loss/active_frac"] == pytest.approx(frac)


def test_under_adamw_a_fifth_of_the_gradient_takes_the_same_step():
    """The normalisation's factor 5 is a factor on the gradient, not on the step: AdamW (the
    engine's optimiser, torch's betas and eps) moves the weights alike for a loss and a fifth of
    it, over several steps (the moments scale alike; eps 1e-8 is far below these gradients)."""
    from tailtheory.core.models import tiny_lm

    ids = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(0))
    moved = []
    for scale in (1.0, 0.2):
        model = tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1, seed=0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        start = [p.detach().clone() for p in model.parameters()]
        for _ in range(3):
            opt.zero_grad()
            loss = model(input_ids=ids, labels=ids).loss * scale
            loss.backward()
            opt.step()
        moved.append([p.detach() - s for p, s in zip(model.parameters(), start)])
    a, b = (torch.cat([x.flatten() for x in m]) for m in moved)
    assert float((a - b).norm() / a.norm()) < 0.02          # the same step, to 2% (0.7% here)
    assert float(b.norm() / a.norm()) == pytest.approx(1.0, abs=0.01)
    # with SGD the same factor is a factor on the step
    sgd = []
    for scale in (1.0, 0.2):
        model = tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1, seed=0)
        start = [p.detach().clone() for p in model.parameters()]
        (model(input_ids=ids, labels=ids).loss * scale).backward()
        torch.optim.SGD(model.parameters(), lr=1e-2).step()
        sgd.append(sum(float((p.detach() - s).norm()) for p, s in zip(model.parameters(), start)))
    assert sgd[1] == pytest.approx(0.2 * sgd[0], rel=1e-4)
