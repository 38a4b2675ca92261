"""The tables behind OTB's checks and figures (tailtheory.otb.experiments): O2, O3/O4, O6."""

import torch

from tailtheory.otb.experiments import group_table, proxy_table, variance_table


def test_o2_proxy_table_is_exact_for_tabular_and_short_with_shared_bias():
    """O2: the proxy W_t is the true prefix norm for the tabular policy, not with a shared bias."""
    df = proxy_table()
    gap = (df.true_prefix_sq_norm - df.W_proxy).abs().groupby(df.parameters).max()
    assert gap["tabular"] < 1e-12 and gap["shared bias"] > 1e-3
    assert set(df.parameters) == {"tabular", "shared bias"}


def test_o3_o4_variance_table_cached_and_no_baseline_beats_the_optimum():
    """O3: every baseline's variance is at least M^-1 c's; the profile table is computed once."""
    rows = variance_table("quick")
    assert rows is variance_table("quick")
    ratios = [r[k] for r in rows for k in r if k.startswith("ratio_")]
    assert min(ratios) >= 1 - 1e-9
    assert {r["eos"] for r in rows} == {-1, 0}


def test_o6_group_table_has_every_method_and_size():
    """O6: one row per (method, N), cosines in [-1, 1]."""
    rows = group_table("quick")
    cells = {(r["method"], r["N"]) for r in rows}
    assert cells == {(m, n) for m in ("grpo", "dr_grpo", "rloo", "otb") for n in (2, 4, 8, 16, 32)}
    assert all(-1 <= r["cosine"] <= 1 for r in rows)
    assert torch.isfinite(torch.tensor([r["rel_mse"] for r in rows])).all()
