"""The logged importance ratio (``tailtheory.diagnose.sections.logged_ratio``): which
aggregation of log rho a framework's ratio is, on constructed arrays; the engine's ``weight``
from its registered corrections (clean) against a geometric mean (planted, TRL issue 5814's mean in
place of the sum); prime-rl's ``importance_ratio`` and its flipped sign; dumps that log none;
streaming."""

import numpy as np
import pytest

from tailtheory.diagnose.cli import diagnose_dumps
from tailtheory.diagnose.sections.logged_ratio import RATIO_TOL, aggregation_check, carriers

from ..conftest import summaries_close
from ..formats.framework_dumps import nemo_rl_dump, prime_rl_dump
from ..planted import DATA, engine_dump, generic_dump, planted_responses, ratio_responses


def _arrays(lengths=(3, 4, 5, 6), mu=0.1, sd=0.05, seed=0):
    rng = np.random.default_rng(seed)
    T = max(lengths)
    mask = np.arange(T)[None, :] < np.array(lengths)[:, None]
    log_rho = np.where(mask, rng.normal(mu, sd, (len(lengths), T)), 0.0)
    S = log_rho.sum(1, keepdims=True)
    return log_rho, mask, S, mask.sum(1, keepdims=True)


def test_constructed_cases():
    lr, mask, S, n = _arrays()
    seq = lambda x: np.broadcast_to(np.exp(x), lr.shape)  # noqa: E731  (one ratio per response)
    cap = float(S.min()) - 0.02                   # every response truncated below its sum
    assert np.all(np.abs(cap - S / n) > RATIO_TOL) and np.all(np.abs(S - S / n) > RATIO_TOL)
    cases = {"sum": (seq(S), "sum", ""), "mean": (seq(S / n), "mean", "mean_not_sum"),
             "-sum": (seq(-S), "-sum", "sign_flipped"), "-mean": (seq(-S / n), "-mean",
                                                                  "sign_flipped"),
             "token": (np.exp(lr), "token", ""), "-token": (np.exp(-lr), "-token",
                                                            "sign_flipped"),
             "capped": (seq(np.minimum(S, cap)), None, "unexplained")}
    for name, (ratio, agg, fault) in cases.items():
        r = aggregation_check(lr, ratio, mask)
        assert (r["aggregation"], r["fault"]) == (agg, fault), name
        assert r["compared"] == 4 and r["counts"].get(agg or "unexplained") == 4, name
    ones = aggregation_check(lr, np.ones_like(lr), mask)
    assert ones["ones"] and ones["aggregation"] is None and ones["fault"] == ""
    zero = aggregation_check(lr, np.zeros_like(lr), mask)
    assert zero["counts"]["masked"] == 4 and zero["aggregation"] is None
    one_token = aggregation_check(lr[:, :1], np.exp(lr[:, :1]), mask[:, :1])
    assert one_token["counts"]["ambiguous"] == 4 and one_token["aggregation"] is None
    off = aggregation_check(lr, seq(S + 3 * RATIO_TOL), mask)       # beyond the tolerance
    assert off["fault"] == "unexplained"
    with pytest.raises(ValueError, match="share one"):
        aggregation_check(lr, np.exp(lr)[:, :2], mask)


def _logged(tmp_path, weight, **kw):
    resps = planted_responses(steps=(0, 1), per_step=6, lengths=(3, 8, 20, 40), sd=0.03,
                              drift=0.02, seed=7, decimals=None, **kw)
    run = engine_dump(tmp_path / weight, resps, weight)
    return diagnose_dumps([run], register=[])


def test_engine_weight_clean_twins_and_the_planted_mean(tmp_path):
    """The engine's ``mis`` and ``tis`` weights read as the sum and the token ratio (MIS's
    masked responses counted apart), no correction as ones; a geometric mean in their place is
    named, in its section and the bottom line."""
    mis = _logged(tmp_path, "mis").summary["logged_ratio"]
    assert (mis["aggregation"], mis["fault"], mis["files"]) == ("sum", "", 2)
    assert mis["counts"]["masked"] > 0 and mis["counts"]["unexplained"] == 0
    assert _logged(tmp_path, "tis").summary["logged_ratio"]["aggregation"] == "token"
    assert _logged(tmp_path, "ones").summary["logged_ratio"]["ones"]
    d = _logged(tmp_path, "geometric")
    r = d.summary["logged_ratio"]
    assert (r["aggregation"], r["fault"]) == ("mean", "mean_not_sum")
    assert r["counts"]["mean"] >= r["compared"] - r["counts"]["ambiguous"] > 0
    assert r["example"]["tokens"] == 40 and r["example"]["logged"] == pytest.approx(
        r["example"]["exp_mean"], rel=1e-9)
    assert "a mean in place of the sum (what TRL issue 5814 asked for, its PR 5815)" in \
        d.verdicts["logged_ratio"][1]
    assert "the logged ratio is exp(mean_t log rho_t), not prod_t rho_t: fix its aggregation" \
        in d.summary["bottom_line"]["text"]


def test_prime_rl_importance_ratio_and_a_flipped_sign(tmp_path):
    resps = planted_responses(steps=(0, 1), seed=8, decimals=None)
    good = prime_rl_dump(tmp_path / "good", resps, ratio=True)
    flip = prime_rl_dump(tmp_path / "flip", resps, ratio="flip")
    assert diagnose_dumps([good], register=[]).summary["logged_ratio"]["aggregation"] == "token"
    d = diagnose_dumps([flip], register=[])
    assert (d.summary["logged_ratio"]["aggregation"], d.summary["logged_ratio"]["fault"]) == \
        ("-token", "sign_flipped")
    assert "pi_roll / pi_train, the inverse of rho: fix its sign" in \
        d.summary["bottom_line"]["text"]


def test_dumps_without_a_logged_ratio_say_which_formats_log_one(tmp_path):
    resps = planted_responses(steps=(1, 2), seed=9, decimals=None)
    d = diagnose_dumps([nemo_rl_dump(tmp_path / "nemo", resps)], register=[])
    assert d.summary["logged_ratio"]["present"] is False
    assert carriers() == ["generic (logged_ratio)", "engine (weight)",
                          "prime-rl (importance_ratio)"]
    assert d.verdicts["logged_ratio"] == [
        "no logged importance ratio in this dump (formats that log one: generic "
        "(logged_ratio), engine (weight), prime-rl (importance_ratio)): its aggregation cannot "
        "be checked."]


@pytest.mark.parametrize("ratio, agg", [("sum", "sum"), ("-sum", "-sum"), ("mean", "mean")])
def test_generic_logged_ratio_and_its_twins(tmp_path, ratio, agg):
    """The docs' example (a mean) and its twins in the generic format: the sum reads as the
    product, with TRL issue 5814's ratios named as that product; a flipped sum as its sign."""
    path = generic_dump(tmp_path / "d.jsonl", ratio_responses(), ratio=ratio)
    d = diagnose_dumps([path], register=[])
    assert d.summary["logged_ratio"]["aggregation"] == agg
    if ratio == "sum":
        assert d.verdicts["logged_ratio"][0].startswith(
            "the logged ratio is prod_t rho_t = exp(sum_t log rho_t) on 4 of 4 responses")
        assert "TRL issue 5814's ratios of 0.4-0.7 with matching per-token log-probs are this " \
               "product" in d.verdicts["logged_ratio"][1]
        assert "the logged ratio is" not in d.summary["bottom_line"]["text"]


def test_streaming_equals_at_once():
    a = diagnose_dumps([DATA / "ratio_mean.jsonl"], batch_rows=7, register=[]).summary
    b = diagnose_dumps([DATA / "ratio_mean.jsonl"], batch_rows=10 ** 6, register=[]).summary
    summaries_close(a["logged_ratio"], b["logged_ratio"])
    summaries_close(a["seq_ratio"], b["seq_ratio"])
    assert a["logged_ratio"]["aggregation"] == "mean"
