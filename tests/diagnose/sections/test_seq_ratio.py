"""Sequence ratios (``tailtheory.diagnose.sections.seq_ratio``): each response's log-ratio split
exactly into mean per-token log-ratio x length; the responses each correction acts on equal the
engine's registered corrections at their defaults; length against per-token size, on planted
dumps; the docs' worked example on its committed fixture."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from tailtheory.diagnose.cli import diagnose_dumps
from tailtheory.diagnose.sections.seq_ratio import (SECTION, break_even, length_or_size,
                                                    method_defaults)
from tailtheory.engine.registry import get_method
from tailtheory.engine.types import MethodParams
from tailtheory.tim.corrections import icepop_keep, mis_keep, seq_tis_weight, tis_weight

from .conftest import drawn
from .test_certify import _doc_block
from ..planted import COMMITTED, DATA, generic_dump, planted_responses, same_records


def test_split_is_exact_and_the_shares_are_the_engines(run):
    """Per response, mean_t log rho x T is sum_t log rho; the share of responses each method
    acts on is what the engine's own correction does to the padded batch."""
    acc, d, recs = run
    df = pd.DataFrame(recs).assign(lr=lambda x: x.logp_train - x.logp_rollout)
    t = d.tables["seq_ratio"].sort_values(["step", "sample_id"]).reset_index(drop=True)
    want = df.groupby(["step", "sample_id"]).lr.agg(["sum", "size"]).reset_index()
    np.testing.assert_allclose(t.mean_log_rho * t.tokens, t.log_ratio, rtol=1e-12)
    np.testing.assert_allclose(t.log_ratio, want["sum"], rtol=1e-9, atol=1e-12)
    hp = MethodParams()
    x = torch.tensor(np.stack([g.lr.to_numpy() for _, g in df.groupby(["step", "sample_id"])]))
    mask = torch.ones_like(x, dtype=torch.bool)
    engine = {"tis": (tis_weight(x, hp.tis_cap) < x.exp()).any(1),
              "icepop": (~icepop_keep(x, hp.icepop_low, hp.icepop_high)).any(1),
              "seq_tis": seq_tis_weight(x, mask, hp.seq_tis_cap) < x.sum(1).exp(),
              "mis": ~mis_keep(x, mask, hp.mis_low, hp.mis_high)}
    s = d.summary["seq_ratio"]
    for m in s["methods"]:
        assert m["share"] == pytest.approx(engine[m["method"]].double().mean().item()), m
        assert m["source"] == get_method(m["method"]).source
    assert 0 < s["methods"][0]["share"] < 1 and 0 < s["methods"][3]["share"] < 1   # they bite
    assert s["mean_log_rho"] == pytest.approx(df.lr.mean(), rel=1e-9)
    assert s["largest"][0]["log_ratio"] == pytest.approx(want["sum"].abs().max(), rel=1e-9) \
        or s["largest"][0]["log_ratio"] == pytest.approx(-want["sum"].abs().max(), rel=1e-9)
    assert drawn(SECTION, d) is d.tables["seq_ratio"]


def test_defaults_are_the_registered_methods():
    hp = MethodParams()
    ms = {m["method"]: m for m in method_defaults()}
    assert list(ms) == ["tis", "icepop", "seq_tis", "mis"]
    assert ms["tis"]["params"] == {"tis_cap": hp.tis_cap}
    assert ms["mis"]["params"] == {"mis_low": hp.mis_low, "mis_high": hp.mis_high}
    assert ms["icepop"]["level"] == "token" and ms["seq_tis"]["acts"] == "truncates"


def test_break_even_and_the_exact_split():
    ms = method_defaults()
    assert break_even(0.012, ms) == pytest.approx({"seq_tis": math.log(2) / 0.012,
                                                   "mis": math.log(2) / 0.012})
    assert break_even(-0.01, ms) == {"seq_tis": None, "mis": pytest.approx(math.log(0.5) / -0.01)}
    assert break_even(0.0, ms) == {"seq_tis": None, "mis": None}
    T, mean = np.array([10.0, 10, 100, 100, 5]), np.array([0.01, -0.02, 0.01, 0.011, 0.0])
    out = np.array([False, False, True, True, False])
    r = length_or_size(T, mean, out)
    S = np.abs(T * mean)[:4]
    geo = lambda x: np.exp(np.log(x).mean())  # noqa: E731
    assert r["factor"] == pytest.approx(geo(S[2:]) / geo(S)) and r["responses"] == 2
    assert r["length"] * r["size"] == pytest.approx(r["factor"])
    assert r["length"] == pytest.approx(geo(T[2:4]) / geo(T[:4]))
    assert length_or_size(T, mean, np.zeros(5, bool))["factor"] is None


@pytest.mark.parametrize("kind", ["length", "size"])
def test_planted_length_and_size(tmp_path, kind):
    """MIS masks long responses at a small per-token log-ratio "by length" (TRL issues 4772
    and 5814) and equal-length ones at a large per-token log-ratio "by per-token size"."""
    resps = (planted_responses(steps=(0,), per_step=8, lengths=(4, 8, 64, 128), sd=0.005,
                               drift=0.012, seed=5) if kind == "length" else
             planted_responses(steps=(0,), per_step=12, lengths=(8,), sd=0.3, seed=5))
    d = diagnose_dumps([generic_dump(tmp_path / "d.jsonl", resps)], register=[])
    o = d.summary["seq_ratio"]["outside_mis"]
    assert o["responses"] > 0
    line = next(x for x in d.verdicts["seq_ratio"] if x.startswith("responses MIS masks"))
    if kind == "length":
        assert o["length"] > o["size"]
        assert "leave the band by length (TRL issues 4772 and 5814" in line
        assert "MIS at its defaults would mask 4 of 8 responses, by their length" in \
            d.summary["bottom_line"]["text"]
    else:
        assert o["length"] == pytest.approx(1.0) and "by per-token size" in line


def test_docs_example_on_the_committed_fixture(tmp_path):
    """docs/diagnose.md shows the sequence-ratio and logged-ratio lines of ``tailtheory
    diagnose`` on ``tests/diagnose/data/ratio_mean.jsonl``, which holds what
    :func:`~tests.diagnose.planted.ratio_mean` writes."""
    path = DATA / "ratio_mean.jsonl"
    assert same_records(path, COMMITTED["ratio_mean.jsonl"](tmp_path / "f.jsonl"))
    assert path.stat().st_size < 8000
    d = diagnose_dumps([path], register=[])        # the lines the command prints, unwritten
    out = [f"[{name}] {x}" for name in ("seq_ratio", "logged_ratio") for x in d.verdicts[name]]
    assert _doc_block("<!-- output: the [seq_ratio] and [logged_ratio] lines of tailtheory "
                      "diagnose tests/diagnose/data/ratio_mean.jsonl --out diag/ -->") == \
        ["$ tailtheory diagnose tests/diagnose/data/ratio_mean.jsonl --out diag/", *out]
