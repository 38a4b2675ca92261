"""The regime table (``tailtheory/regime/table.py``): computed from the stored measurements,
ratios right, missing paper values shown as such, ``docs/regime.md`` current."""

import pytest

from tailtheory.regime import table as rt
from tailtheory.core.registry import Verdict, all_claims
from tailtheory.experiments.policies import grpo_config
from tailtheory.lopti.decisive.store import decisive_data, decisive_share
from tailtheory.regime.quantities import DECISIVE_SHARE, NEGATIVE, NOT_STATED, QUANTITIES


def _limited(claims=("L1", "L4", "L5")) -> str:
    """The "regime-limited?" cell of a quantity outside 2x read by ``claims``, from their ledger
    verdicts: only a negative verdict is limited (L1, L4 and L5 read PENDING while the rows
    they rest on name no model)."""
    v = {c: all_claims()[c].expected for c in claims}
    neg = [f"{c} {x.value}" for c, x in v.items() if x in NEGATIVE]
    return "yes: " + ", ".join(neg) if neg else "outside 2x; no negative verdict"


@pytest.fixture(scope="module")
def rows():
    return rt.regime_rows(("learn",))


def test_docs_regime_md_is_current():
    """docs/regime.md equals what the stored measurements give; regenerate with
    ``python -m tailtheory.regime.table``."""
    assert rt.DOCS.read_text(encoding="utf-8") == rt.render(), (
        "docs/regime.md is out of date: run `python -m tailtheory.regime.table`")


def test_every_quantity_is_measured_on_both_policies(rows):
    """Every quantity has a value on both policies of ``learn``; the decisive share alone may be
    NaN, and only where its store says "not reportable" (below the floor of 200 lowest-bin
    tokens of 40 prompts), where the table shows it blank."""
    shares = decisive_share(decisive_data("quick", "learn"), grpo_config("learn").group_size)
    assert [r["key"] for r in rows] == [q.key for q in QUANTITIES]
    for r in rows:
        for p in ("warm", "mid"):
            v = r[f"learn {p}"]
            assert v is not None, (r["key"], p)
            if r["key"] == DECISIVE_SHARE:
                blank = shares[p]["share_note"].startswith("not reportable")
                assert (v != v) == blank, (p, v, shares[p]["share_note"])
                if blank:
                    continue
                assert v == shares[p]["decisive_share"], p
            assert v == v and v >= 0, (r["key"], p)
    md = rt.markdown_table(rows, ("learn",))
    line = next(ln for ln in md.splitlines() if "called decisive" in ln)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert [c == rt.NOT_REPORTABLE for c in cells[3:5]] == [
        shares[p]["share_note"].startswith("not reportable") for p in ("warm", "mid")]


def test_ratios_are_testbed_over_paper(rows):
    for r in rows:
        for p in ("warm", "mid"):
            got = r[f"learn {p} ratio"]
            if r["paper"] is None:
                assert got is None
            else:
                assert got == pytest.approx(r[f"learn {p}"] / r["paper"], rel=1e-12)


def test_lowest_bin_is_far_below_the_paper(rows):
    """From the stored probes: 1.6-1.8% of the learn recipe's warm-start tokens and about 0.6%
    half-way sit in [0, .25], against LOPTI's 19.2%: the LOPTI probes' claims read there are
    regime-limited."""
    low = next(r for r in rows if r["key"] == "lopti/tok_frac_b0")
    assert 0.015 < low["learn warm"] < 0.019 and 0.004 < low["learn mid"] < 0.008
    assert low["learn warm ratio"] < 0.1
    assert low["regime-limited?"] == _limited()


def test_matched_recipe_is_in_the_papers_regime_in_the_lowest_bin():
    """The matched recipe: >= 9.6% of sampled tokens in [0, .25] and <= 80% in the top bin at
    both policies (its recorded criterion), within 2x of LOPTI's lowest bin; its third bin stays
    outside 2x, so L1, L4, L5 (read there) are marked regime-limited in that bin alone."""
    both = {r["key"]: r for r in rt.regime_rows(("matched", "learn"))}
    low, third, top = (both[f"lopti/tok_frac_b{b}"] for b in (0, 2, 3))
    for p in ("warm", "mid"):
        assert low[f"matched {p}"] >= 0.096 and top[f"matched {p}"] <= 0.80
        assert rt.in_band(low[f"matched {p} ratio"])
    assert low["regime-limited?"] == "no: within 2x"
    assert third["regime-limited?"] == _limited()
    by = {c["claim"]: c for c in rt.claim_rows(list(both.values()), ("matched", "learn"))}
    assert by["L4"]["measured on"] == "matched" and by["L2"]["measured on"] == "matched"
    assert by["V6"]["measured on"] == "learn"


def test_missing_paper_value_is_not_stated(rows):
    md = rt.markdown_table(rows, ("learn",))
    line = next(ln for ln in md.splitlines() if "reward variance within a group" in ln)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == NOT_STATED and cells[5] == cells[6] == "–"
    assert cells[7] == "unknown: no paper value"
    assert "0.192 (LOPTI arXiv 2505.12929 Fig. 1(a)" in md


def test_claim_readings(rows):
    by = {c["claim"]: c for c in rt.claim_rows(rows, ("learn",))}
    assert by["L4"]["outside 2x"] >= 1
    for c in ("L1", "L4"):
        assert by[c]["verdict"] == all_claims()[c].expected.value
        assert by[c]["reading"].startswith(
            "no verdict yet (PENDING); its regime: outside 2x" if by[c]["verdict"] == "PENDING"
            else "regime-limited")
    assert by["L2"]["verdict"] == "NOT-REPRODUCED"              # a verdict on named runs
    assert Verdict(by["L2"]["verdict"]) in NEGATIVE
    assert by["P5"]["reading"].startswith("regime unknown")  # DVP states no pruned mass here
    assert set(by) == set(rt.CLAIMS)


def test_probe_beside_the_stored_studies(rows):
    """On the warm start the probe and the studies measure one policy (other batches): they
    agree within 15%; the stored column is the table's."""
    beside = rt.probe_beside("learn")
    assert {b["stored in"] for b in beside} == {"dvp_learn", "mismatch_learn"}
    table = {r["quantity"]: r for r in rows}
    for b in beside:
        assert b["warm start: stored"] == table[b["quantity"]]["learn warm"]
        assert b["half-way: stored"] == table[b["quantity"]]["learn mid"]
        assert b["warm start: probe"] == pytest.approx(b["warm start: stored"], rel=0.15)


def test_bad_recipes_are_clear_errors():
    with pytest.raises(ValueError, match="unknown recipe 'nope'; valid recipes"):
        rt.regime_rows(("nope",))
    with pytest.raises(ValueError, match="non-empty sequence"):
        rt.regime_rows("learn")


def test_bin_fraction_figure(rows):
    fig, data = rt.plot_bin_fractions(("learn",))
    assert len(data) == 12 and set(data["series"]) == {"LOPTI Fig. 1(a), Qwen2.5-7B",
                                                       "learn warm start", "learn half-way"}
    paper = data[data.series.str.startswith("LOPTI")]["share"].tolist()
    assert paper == [0.192, 0.102, 0.101, 0.605]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_frame_shows_missing_paper_values_as_not_stated():
    df = rt.regime_frame(("learn",))
    row = df.loc["reward variance within a group (mean over groups; R_max = 1)"]
    assert row["paper"] == NOT_STATED and row["learn warm ratio"] == "–"
    assert df.loc["responses per prompt G", "learn warm ratio"] == 1.0
