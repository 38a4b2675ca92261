"""The regime quantities and the ratio rule (``tailtheory/regime/quantities.py``)."""

import pytest

from tailtheory.core.registry import Verdict, all_claims
from tailtheory.regime import quantities as rq


def test_keys_are_unique_and_every_claim_of_issue_31_has_a_quantity():
    keys = [q.key for q in rq.QUANTITIES]
    assert len(keys) == len(set(keys))
    registered = all_claims()
    for q in rq.QUANTITIES:
        assert q.claims and set(q.claims) <= set(rq.CLAIMS) <= set(registered), q.key
        assert (q.paper is None) == (not q.cite), f"{q.key}: a paper value needs its citation"
    covered = {c for q in rq.QUANTITIES for c in q.claims}
    assert covered == set(rq.CLAIMS)


def test_paper_values_are_the_quoted_ones():
    """LOPTI Fig. 1(a) as the paper reports it (its bins add up to the whole), the share below eta
    derived from it, Fig. 1(d)'s shares; every other quantity has no paper value."""
    assert sum(rq.LOPTI_FIG1A) == pytest.approx(1.0, abs=1e-12)
    assert rq.quantity("lopti/tok_frac_b0").paper == 0.192
    assert rq.quantity("lopti/tok_frac_below_eta").paper == pytest.approx(0.294)
    assert rq.quantity("lopti/grad_share_low").paper == pytest.approx(0.71 / 0.82)
    with_paper = {q.key for q in rq.QUANTITIES if q.paper is not None}
    assert with_paper == {*(f"lopti/tok_frac_b{b}" for b in range(4)), "lopti/tok_frac_below_eta",
                          "lopti/grad_share_low", "lopti/grad_share_high",
                          "recipe/temperature", "recipe/group_size"}
    assert all("arXiv 2505.12929" in rq.quantity(k).cite for k in with_paper)


def test_thresholds_paths_and_eta():
    """DVP's thresholds from 1e-8 to 1e-2; the real paths; Lopti's eta is the second bin edge,
    so the share below it is the first two bins' (``sources.bin_values``)."""
    from tailtheory.lopti.probes import BIN_EDGES

    assert rq.RHOS == (1e-8, 1e-6, 1e-4, 1e-2) and rq.PATHS == ("bf16", "fp8")
    assert rq.LOPTI_ETA == BIN_EDGES[1] == 0.5


def test_unknown_quantity_lists_the_valid_ones():
    with pytest.raises(KeyError, match="lopti/tok_frac_b0"):
        rq.quantity("lopti/nope")


@pytest.mark.parametrize("testbed, paper, expected", [
    (0.0167, 0.192, 0.0167 / 0.192), (0.4, 0.2, 2.0), (None, 0.2, None), (0.3, None, None),
    (0.3, 0.0, None), (float("nan"), 0.2, None)])
def test_ratio(testbed, paper, expected):
    r = rq.ratio(testbed, paper)
    assert r == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("r, expected", [(0.5, True), (2.0, True), (1.0, True), (0.49, False),
                                         (2.01, False), (None, None)])
def test_band_is_closed_at_two_x(r, expected):
    assert rq.in_band(r) is expected


def test_row_reading():
    neg = {"L4": Verdict.NOT_REPRODUCED, "L1": Verdict.TOY_SCALE, "L5": Verdict.REFUTED}
    same = lambda rs: {c: rs for c in neg}  # noqa: E731 (every claim read on one recipe)
    assert rq.row_limited(same([None, None]), neg) == "unknown: no paper value"
    assert rq.row_limited(same([0.8, None, 1.9]), neg) == "no: within 2x"
    assert rq.row_limited(same([0.8, 0.09]), neg) == "yes: L4 NOT-REPRODUCED, L5 REFUTED"
    assert rq.row_limited({"L1": [3.0]}, {"L1": Verdict.TOY_SCALE}) == (
        "outside 2x; no negative verdict")
    # each claim against its own recipe: L4 read where the ratio is outside, L5 where inside
    assert rq.row_limited({"L4": [0.09], "L5": [1.0]}, neg) == "yes: L4 NOT-REPRODUCED"


def test_claim_reading():
    assert rq.reading(Verdict.NOT_REPRODUCED, ["a"], ["b"]).startswith("regime-limited")
    assert rq.reading(Verdict.REFUTED, ["a"], []).endswith("in a")
    assert rq.reading(Verdict.TOY_SCALE, ["a"], []).startswith("reproduced although")
    assert rq.reading(Verdict.NOT_REPRODUCED, [], ["b"]) == "in the paper's regime where compared"
    assert rq.reading(Verdict.REFUTED, [], []).startswith("regime unknown")
