"""Tests of tailtheory.mismatch.real: claim M7 (TIM), real mismatch on a tiny transformer."""

import pytest
import torch

from tailtheory.mismatch import real as rm
from tailtheory.mismatch.figures import plot_mismatch_vs_p

V = 512


@pytest.fixture(scope="module")
def model():
    return rm.m7_model(V, hidden=64, layers=2)


@pytest.fixture(scope="module")
def ids():
    return rm.random_input_ids(V, 4, 16, seed=1)


@pytest.fixture(scope="module")
def pairs(model, ids):
    return {path: rm.paired_logits(model, ids, path) for path in rm.M7_PATHS}


def test_paired_logits_shapes_and_trainer_is_fp32_forward(model, ids, pairs):
    """M7: every path returns float64 (B, T, V) pairs; the trainer side is the fp32 forward."""
    with torch.no_grad():
        ref = model(input_ids=ids).logits.double()
    for path, (z, z_inf) in pairs.items():
        assert z.shape == z_inf.shape == (4, 16, V) and z.dtype == z_inf.dtype == torch.float64
        torch.testing.assert_close(z, ref, atol=0, rtol=0)
        assert torch.isfinite(z_inf).all()


def test_paired_logits_leaves_model_unchanged(model, ids):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rm.paired_logits(model, ids, "bf16")
    after = model.state_dict()
    assert all(after[k].dtype == torch.float32 and torch.equal(after[k], v)
               for k, v in before.items())


def test_mismatch_is_real_and_ordered(pairs):
    """M7: the mismatch is nonzero on every path, largest for bf16, smallest for the KV cache."""
    size = {p: float((z_inf - z).abs().max()) for p, (z, z_inf) in pairs.items()}
    assert 0 < size["kv"] < size["fp16"] < size["bf16"]
    assert size["kv"] < 1e-3


def test_kv_path_at_one_token_is_the_full_forward(model, ids):
    """Zero at zero: with one token, incremental decoding is the full forward, bit for bit (the
    same forward on the same (B, 1) input: no decode step has run yet)."""
    z, z_inf = rm.paired_logits(model, ids[:, :1], "kv")
    assert torch.equal(z, z_inf)


def test_m7_envelope_under_exact_bound_and_tail_heavy(pairs):
    """M7: every token lies under M3's exact bound at the measured eps (a theorem), and
    |Delta| on tail tokens (p < 1e-3) dwarfs |Delta| on head tokens (p > 0.9)."""
    for path, (z, z_inf) in pairs.items():
        for per in ("position", "token"):
            s, df = rm.mismatch_envelope(z, z_inf, n_bins=12, per=per)
            assert s["frac_under_exact"] == 1.0, (path, per, s)
            assert s["max_ratio_exact"] <= 1 + rm.BOUND_RTOL
        assert s["frac_head"] > 0 and s["frac_tail"] > 0.5
        assert s["head_mean_abs"] < 0.1 * s["tail_mean_abs"], (path, s)
        assert {"p_mid", "count", "mean_abs_Delta", "max_abs_Delta", "mean_bound_exact"} <= set(df)
        assert df["count"].sum() == s["n_tokens"]


def test_m7_envelope_ratio_reaches_one_on_the_witness():
    """M3's witness through the envelope: every other logit raised by 2 eps, token 0 not, gives
    |Delta_0| / bound = 1 (the envelope's ratio is not capped below 1 by construction)."""
    z = torch.log(torch.tensor([[[0.4, 0.3, 0.2, 0.1]]], dtype=torch.float64))
    z_inf = z + 0.6
    z_inf[..., 0] = z[..., 0]
    s, _ = rm.mismatch_envelope(z, z_inf, n_bins=2)
    assert abs(s["max_ratio_exact"] - 1) < 1e-12 and s["frac_under_exact"] == 1.0


def test_m7_envelope_slope_is_one_for_small_noise_and_can_fail(monkeypatch):
    """M7: the binned log-log slope of mean |Delta| vs (1-p) is ~1 on the real bf16 pair of
    M7's quick setup, and falls outside M7_SLOPE_RANGE for a |Delta| that ignores p (the shape
    check can fail)."""
    from tailtheory.mismatch import claims as claims_mismatch

    pair = rm.paired_logits(rm.m7_model(), rm.random_input_ids(V, 8, 24, seed=0), "bf16")
    lo, hi = claims_mismatch.M7_SLOPE_RANGE
    slope, n_bins = claims_mismatch.envelope_slope(*pair)
    assert n_bins >= 3 and lo <= slope <= hi
    def flat(z, z_prime):
        return torch.ones_like(torch.as_tensor(z, dtype=torch.float64))

    monkeypatch.setattr(claims_mismatch.mm, "logprob_mismatch", flat)
    slope, _ = claims_mismatch.envelope_slope(*pair)
    assert abs(slope) < 1e-9


def test_plot_mismatch_vs_p(pairs):
    import matplotlib.pyplot as plt

    fig, df = plot_mismatch_vs_p(pairs, max_points=2000)
    assert set(df.label) == set(rm.M7_PATHS)
    assert (df.abs_Delta <= df.bound_exact * (1 + rm.BOUND_RTOL) + 1e-15).all()
    plt.close(fig)


# --- bad input ----------------------------------------------------------------------------------

def test_bad_path_and_ids_rejected(model, ids):
    with pytest.raises(ValueError, match="path must be one of"):
        rm.paired_logits(model, ids, "int8")
    with pytest.raises(ValueError, match="input_ids must hold integer"):
        rm.paired_logits(model, ids.float())
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 512\)"):
        rm.paired_logits(model, ids + V)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(B, T\)"):
        rm.paired_logits(model, ids[0])


def test_non_fp32_model_and_bad_scale_rejected(model, ids):
    import copy

    with pytest.raises(ValueError, match="model must be the float32 trainer"):
        rm.paired_logits(copy.deepcopy(model).to(torch.bfloat16), ids)
    with pytest.raises(ValueError, match="scale must be > 0"):
        rm.sharpen(model, 0.0)


def test_nan_logits_rejected_by_envelope():
    z = torch.zeros(1, 2, 4)
    bad = z.clone()
    bad[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="perturbed_logits"):
        rm.mismatch_envelope(z, bad)


def test_policy_windows_are_prompt_then_own_response():
    """M7's input on a task policy: each row is a held-out prompt followed by the policy's own
    sampled tokens, cut to T; too few long texts is an error naming the fix."""
    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.tasks.task import get_task

    task = get_task("kk", seed=0)
    model = tiny_lm(vocab_size=task.vocab_size, hidden=32, layers=1, heads=2, kv_heads=1)
    problems = task.problems(8, seed=202)
    T = max(len(p.prompt_ids) for p in problems) + 2
    ids = rm.policy_windows(model, task, 3, T, max_prompts=8)
    assert ids.shape == (3, T) and ids.dtype == torch.long
    starts = [p.prompt_ids for p in problems if len(p.prompt_ids) <= T]
    assert any(ids[0, :len(s)].tolist() == list(s) for s in starts)
    assert int(ids.max()) < task.vocab_size
    with pytest.raises(ValueError, match="reach"):
        rm.policy_windows(model, task, 3, 10_000, max_prompts=4)


def test_m7_verdict_is_the_matched_policies_with_todays_beside(monkeypatch):
    """M7: TOY-SCALE only when every model shows the envelope on every path; the claim's
    verdict is the matched recipe's policies', today's two models beside it."""
    from tailtheory.core.registry import Verdict
    from tailtheory.mismatch import claims as c

    good = c._m7_numbers(rm.m7_model(), rm.random_input_ids(V, 8, 24, seed=0))
    assert not c._m7_failures(good)
    bad = {**good, "bf16/envelope_slope": 0.0}
    monkeypatch.setattr(c, "_m7_corpus", lambda profile: good)
    monkeypatch.setattr(c, "_m7_matched", lambda profile: {"matched_warm": good,
                                                           "matched_mid": bad})
    ev = c._m7("quick")
    assert ev.verdict == Verdict.NOT_REPRODUCED and ev.numbers["matched_mid/shape"] == "no"
    assert ev.numbers["random model and corpus LM: verdict"] == "TOY-SCALE"
    assert "matched_mid fails bf16 slope 0.00" in ev.note
    monkeypatch.setattr(c, "_m7_matched", lambda profile: {"matched_warm": good,
                                                           "matched_mid": good})
    assert c._m7("quick").verdict == Verdict.TOY_SCALE
