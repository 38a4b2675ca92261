"""Where the regime numbers come from (``tailtheory/regime/sources.py``): pooling on hand-made
rows, and the stored probe against the stored studies it must agree with."""

import json

import numpy as np
import pytest

from tailtheory.core.io import REPO_ROOT
from tailtheory.regime import sources as rs
from tailtheory.regime.quantities import PATHS, RHOS


def _stored(name: str) -> dict:
    return json.loads((REPO_ROOT / "results" / f"{name}.json").read_text())["data"]


def fake_row(rewards, lens=(2, 4), group_size=2) -> dict:
    tokens = sum(lens) * len(rewards) // len(lens)
    return {"tokens": tokens, "count": [1, 1, 2, tokens - 4], "adv_abs_sum": [2.0, 0.0, 1.0, 0.5],
            "len": list(lens) * (len(rewards) // len(lens)), "reward": list(rewards),
            "group_size": group_size, "pruned_sum": {str(r): 0.1 * i for i, r in enumerate(RHOS)},
            **{f"k3_sum:{p}": 0.6 for p in PATHS}, **{f"tokens:{p}": 12 for p in PATHS},
            **{f"responses:{p}": 4 for p in PATHS}}


def test_probe_values_pool_by_hand():
    v = rs.probe_values([fake_row([1.0, 0.0, 0.1, 0.1])])   # 4 responses of 2 and 4 tokens
    assert v["lopti/tok_frac_b0"] == 1 / 12 and v["lopti/tok_frac_below_eta"] == 2 / 12
    assert v["lopti/adv_abs_b0"] == 2.0 and v["lopti/adv_abs_b2"] == 0.5
    assert v["rollout/len_mean"] == 3.0
    assert v["reward/group_var"] == pytest.approx(0.125)      # groups (1, 0) and (0.1, 0.1)
    assert v["reward/zero_var_frac"] == 0.5
    assert v[f"dvp/pruned_mass_tok@{RHOS[1]:g}"] == pytest.approx(0.1 / 12)
    assert v[f"dvp/pruned_mass_seq@{RHOS[1]:g}"] == pytest.approx(0.1 / 4)
    assert v["mismatch/k3_tok:bf16"] == pytest.approx(0.05)
    assert v["mismatch/k3_seq:bf16"] == pytest.approx(0.15)


def test_empty_bin_is_nan_not_zero():
    v = rs.bin_values([0, 2, 2, 6], 10, [0.0, 1.0, 1.0, 1.0])
    assert np.isnan(v["lopti/adv_abs_b0"]) and v["lopti/tok_frac_b0"] == 0.0


def test_probe_draws_the_lopti_probes_batches():
    """The stored probe and the stored LOPTI probes sampled the same batches from the same
    policies: equal tokens and bin counts, batch by batch, warm start and half-way."""
    probe, lopti = _stored("regime_learn"), _stored("lopti_probes_learn")
    for policy in ("warm", "mid"):
        mine = [(r["seed"], r["batch"], r["tokens"], r["count"]) for r in probe[policy]]
        theirs = [(r["seed"], r["batch"], r["tokens"], [int(c) for c in r["count"]])
                  for r in lopti[policy]["batches"]]
        assert mine == theirs, policy


def test_probe_mismatch_is_the_training_runs_first_step():
    """Batch 0 of seed s on a real path is step 0 of that path's run of seed s: the probe's k3
    equals the mismatch study's stored step-0 k3 (same code, same draws)."""
    probe, study = _stored("regime_learn")["warm"], _stored("mismatch_learn")
    for path in PATHS:
        runs = {r["seed"]: r["k3"][0] for r in study[f"{path} recompute"]}
        for r in (r for r in probe if r["batch"] == 0):
            assert r[f"k3_sum:{path}"] / r[f"tokens:{path}"] == pytest.approx(runs[r["seed"]],
                                                                               rel=1e-6)


def test_learn_values_name_their_sources():
    v = rs.regime_values("learn")
    assert set(v) == {"warm", "mid"}
    warm = v["warm"]
    assert warm["lopti/tok_frac_b0"][1] == "lopti_probes_learn"
    assert warm[f"dvp/pruned_mass_tok@{RHOS[2]:g}"][1] == "dvp_learn"
    assert warm["mismatch/k3_seq:fp8"][1] == "mismatch_learn"
    assert warm["reward/group_var"][1] == "regime_learn"
    assert warm["recipe/temperature"] == (1.0, "recipe learn")
    assert sum(warm[f"lopti/tok_frac_b{b}"][0] for b in range(4)) == pytest.approx(1.0)
    # the stored studies and the probe agree where both measure (the bins: exactly)
    probe = rs.probe_values(_stored("regime_learn")["warm"])
    assert probe["lopti/tok_frac_b0"] == pytest.approx(warm["lopti/tok_frac_b0"][0], rel=1e-12)


def test_unknown_recipe_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown recipe 'matched-nope'; valid recipes"):
        rs.regime_values("matched-nope")
