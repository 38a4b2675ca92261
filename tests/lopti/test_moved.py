"""Which tokens each method moves (``tailtheory/lopti/moved.py``): cell means by hand, seed
means with their standard errors, an unfinished run refused, and the whole scoring on the
``quick`` warm start (a policy scored against itself moves nothing; the calls join only the
store's batch; the rows name the warm start)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from provenance_check import check_named
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.lopti import moved as mv


def _batch(calls=None):
    """Two responses of three tokens: bins [[0, 0, 3], [1, 0, 3]], role groups fork / free
    choice / scaffold by column, the last token of row 1 off the mask."""
    return {"mask": torch.tensor([[True, True, True], [True, True, False]]),
            "bins": torch.tensor([[0, 0, 3], [1, 0, 3]]),
            "group": torch.tensor([[0, 1, 2], [0, 1, 2]]), "calls": calls or {}}


def test_cell_means_by_hand():
    d = torch.tensor([[1.0, -2.0, 0.5], [3.0, -4.0, 99.0]])
    out = mv._cell_means([d, d + 1.0], [_batch({(0, 1): "decisive"}), _batch()])
    fork, free = out["role"]["fork"], out["role"]["free choice"]
    assert fork["n"] == [2, 2, 0, 0] and fork["mean"][:2] == [1.5, 3.5]   # (1 + 2) / 2, (3 + 4) / 2
    assert free["n"] == [4, 0, 0, 0] and free["mean"][0] == pytest.approx(-2.5)
    assert out["role"]["scaffold"]["n"] == [0, 0, 0, 2]                  # 99 is off the mask
    assert out["role"]["scaffold"]["mean"][3] == pytest.approx(1.0)
    assert all(math.isnan(x) for x in out["role"]["off path"]["mean"])
    decisive = out["call"]["decisive"]
    assert decisive["n"] == [1, 0, 0, 0] and decisive["mean"][0] == -2.0   # (0, 1) of batch 0
    assert out["call"]["free"]["n"] == [0, 0, 0, 0]


def _cell(mean):
    return {"mean": [mean, float("nan"), 0.0, 0.0], "n": [5, 0, 7, 7]}


def test_moved_table_takes_seed_means_and_their_standard_errors():
    data = {"arms": {lab: {str(s): {"role": {"fork": _cell(m)}, "call": {"free": _cell(m)}}
                           for s, m in zip((1, 2, 3), ms)}
                     for lab, ms in (("GRPO", (0.1, 0.2, 0.3)), ("Upweight", (1.0, 1.0, 1.0)))}}
    t = mv.moved_table(data)
    row = t[(t.arm == "GRPO") & (t.kind == "role") & (t.bin == 0)].iloc[0]
    assert row.dlogp == pytest.approx(0.2) and row.se == pytest.approx(0.1 / math.sqrt(3))
    assert (row.seeds, row.tokens) == (3, 5)
    empty = t[(t.arm == "GRPO") & (t.bin == 1)].iloc[0]
    assert math.isnan(empty.dlogp) and empty.seeds == 0 and empty.tokens == 0
    assert t[(t.arm == "Upweight") & (t.bin == 0)].se.tolist() == [0.0, 0.0]
    assert len(t) == 2 * 2 * 4


def test_an_unfinished_run_is_refused_naming_its_study(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="not finished in the run cache; train it with: "
                                         "tailtheory study upweight_matched"):
        mv.final_policy(mv.arms()["Upweight"][0])


def test_arms_are_grpo_and_the_three_methods_three_seeds_each():
    arms = mv.arms()
    assert list(arms) == ["GRPO", "Upweight", "Top-entropy 20%", "Random 20%"]
    assert {lab: [c.seed for c in cs] for lab, cs in arms.items()} == {
        lab: [1, 2, 3] for lab in arms}
    assert set(mv.moved_config()["arms"]) == set(arms)


def _nudged(model, scale):
    out = type(model)(model.config)
    out.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.linspace(-1, 1, p.numel()).reshape(p.shape))
    return out.float().eval()


def test_scores_on_the_quick_warm_start_name_it_and_join_only_the_stores_batch(tmp_path,
                                                                           monkeypatch):
    from tailtheory.engine.load import load_start
    from tailtheory.experiments.presets import train_config

    cfg = train_config("quick", prompts_per_step=2, group_size=4, device="cpu")
    warm, task = load_start(cfg)
    warm = warm.float().eval()
    fp = weights_fingerprint(warm)
    monkeypatch.setattr(mv, "grpo_config", lambda recipe: cfg)
    monkeypatch.setattr(mv, "load_start", lambda c: (warm, task))
    monkeypatch.setattr(mv, "arms", lambda: {
        "GRPO": [replace(cfg, seed=1)],
        "Other": [replace(cfg, method="ar", seed=1), replace(cfg, method="ar", seed=2)]})
    monkeypatch.setattr(mv, "final_policy", lambda c: warm if c.method == "grpo"
                        else _nudged(warm, 1e-3 * c.seed))
    stored = {"weights": fp, "tokens": []}
    monkeypatch.setattr(mv.store, "decisive_data", lambda profile, recipe: {"warm": stored})

    data = mv.measure_moved(progress=False)
    check_named(data, fp, machine())
    assert [b["joined"] for b in data["batches"]] == [True, True, True]   # no probed token
    same = data["arms"]["GRPO"]["1"]["role"]
    assert sum(sum(c["n"]) for c in same.values()) > 0
    assert all(x == 0.0 for c in same.values() for x, n in zip(c["mean"], c["n"]) if n)
    other = data["arms"]["Other"]
    assert set(other) == {"1", "2"} and other["1"]["final_weights"] != fp
    assert any(x != 0.0 for c in other["2"]["role"].values() for x, n in zip(c["mean"], c["n"])
               if n)

    # the top-entropy selection: exactly ceil(0.2 n) of each batch, every count within all's
    sel = data["selected"]
    kept = sum(sum(v) for v in sel["top_entropy"].values())
    n = [int(b["mask"].sum()) for b in mv._batches(warm, task, cfg, [])]
    assert kept == sum(math.ceil(0.2 * x) for x in n)
    assert sum(sum(v) for v in sel["all"].values()) == sum(n)      # every token has a group
    assert all(a >= k for g in mv.ROLE_GROUPS for a, k in zip(sel["all"][g], sel["top_entropy"][g]))
    by_prompt = sel["by_prompt"]                 # (seed, prompt, group, tokens, kept) per prompt
    assert len(by_prompt) == 3 * 2 * len(mv.ROLE_GROUPS)          # 3 batches x 2 prompts x groups
    assert sum(r[4] for r in by_prompt) == kept and sum(r[3] for r in by_prompt) == sum(n)
    shares = mv.selection_table(data)
    assert shares["all tokens"].sum() == pytest.approx(1.0)
    assert shares["top-entropy 20%"].sum() == pytest.approx(1.0)
    assert (shares["low"] <= shares["top-entropy 20%"] + 1e-12).all()
    assert (shares["top-entropy 20%"] <= shares["high"] + 1e-12).all()
    assert set(shares["kept tokens"]) == {kept} and set(shares["prompts"]) == {6}
    assert set(shares["tokens"]) == {sum(n)}
    assert (shares["all low"] <= shares["all tokens"] + 1e-12).all()
    assert (shares["all tokens"] <= shares["all high"] + 1e-12).all()

    # the store's tokens: one whose p is the batch's joins with its call, one off by 1e-3 does not
    batches = mv._batches(warm, task, cfg, [])
    b0 = batches[0]
    row, t = (int(x) for x in b0["mask"].nonzero()[0])
    tok = {"seed": 1, "batch": 0, "row": row, "t": t, "p": float(b0["pi_old"][row, t]),
           "D": 0.9, "D_se": 0.01}
    joined = mv._batches(warm, task, cfg, [tok])[0]
    assert joined["joined"] and joined["calls"] == {(row, t): "decisive"}
    off = mv._batches(warm, task, cfg, [{**tok, "p": tok["p"] + 1e-3}])[0]
    assert not off["joined"] and off["calls"] == {} and off["probed"] == 1


def test_the_warm_start_must_be_the_decisiveness_stores(monkeypatch):
    from tailtheory.engine.load import load_start
    from tailtheory.experiments.presets import train_config

    cfg = train_config("quick", prompts_per_step=2, group_size=4, device="cpu")
    warm, task = load_start(cfg)
    monkeypatch.setattr(mv, "grpo_config", lambda recipe: cfg)
    monkeypatch.setattr(mv, "load_start", lambda c: (warm, task))
    monkeypatch.setattr(mv.store, "decisive_data",
                        lambda profile, recipe: {"warm": {"weights": "0" * 16, "tokens": []}})
    with pytest.raises(ValueError, match="measured weights 0000000000000000, not this warm"):
        mv.measure_moved(progress=False)


def test_plot_moved_draws_a_panel_per_role_group_and_the_calls():
    import matplotlib
    matplotlib.use("Agg")

    data = {"arms": {lab: {str(s): {"role": {g: _cell(0.1 * s) for g in mv.ROLE_GROUPS},
                                    "call": {c: _cell(-0.1 * s) for c in mv.CALLS}}
                           for s in (1, 2, 3)} for lab in ("GRPO", "Upweight")}}
    fig, table = mv.plot_moved(data)
    assert len(fig.axes) == len(mv.ROLE_GROUPS) + 1
    assert fig.axes[0].get_title() == "fork (19 tokens)"
    assert len(fig.axes[-1].patches) == 2 * len(mv.CALLS)
    assert set(table.arm) == {"GRPO", "Upweight"}


def test_token_stats_are_the_full_vocabularys_at_each_response_token():
    """One forward gives both numbers: the sampled token's log-probability and the entropy over
    the full vocabulary, checked against a direct softmax of that row alone (to float32
    rounding: another shape), in chunks that split the batch unevenly."""
    from tailtheory.core.forward import position_ids
    from tailtheory.engine.load import load_start
    from tailtheory.experiments.presets import train_config

    cfg = train_config("quick", prompts_per_step=2, group_size=4, device="cpu")
    warm, task = load_start(cfg)
    warm = warm.float().eval()
    b = mv._batches(warm, task, cfg, [])[0]
    logp, h = mv._token_stats(warm, b, rows=3)             # chunks of 3 rows: 8 = 3 + 3 + 2
    assert (logp[~b["mask"]] == 0).all() and (h[~b["mask"]] == 0).all()
    row, t = (int(x) for x in b["mask"].nonzero()[-1])
    ids = b["pb"].input_ids[row:row + 1]
    attn = b["pb"].attention_mask[row:row + 1].bool()
    with torch.no_grad():
        z = warm(input_ids=ids, attention_mask=attn.long(), position_ids=position_ids(attn)).logits
    lp = torch.log_softmax(z[0, b["P"] + t - 1].double(), -1)
    assert float(h[row, t]) == pytest.approx(float(-(lp.exp() * lp).sum()), rel=1e-4, abs=1e-6)
    y = int(ids[0, b["P"] + t])
    assert float(logp[row, t]) == pytest.approx(float(lp[y]), rel=1e-4, abs=1e-6)
    assert float(logp[row, t]) == pytest.approx(math.log(float(b["pi_old"][row, t])), abs=1e-4)
