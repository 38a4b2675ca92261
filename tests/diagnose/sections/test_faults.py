"""The faults section (``tailtheory.diagnose.sections.faults``): the fault checks folded over the
run, their warnings named first; each fault triggered by a dump that has it and not by a clean
one, refused as one line (exit 2, nothing written) or named as a warning."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from tailtheory.cli import main
from tailtheory.diagnose.cli import diagnose_dumps, run_diagnose
from tailtheory.diagnose.sections import SECTIONS, faults
from tailtheory.diagnose.sections.faults import SECTION, FaultScan

from ..conftest import engine_frame, logit_tokens, write_jsonl
from ..test_read import GOOD, _fails


def _shifted(recs, lead=True, share=1.0):
    """The records with logp_train moved one position within the first ``share`` of the
    responses: ``lead``: slot t holds token t + 1's (the last slot keeps its own)."""
    df = pd.DataFrame(recs)
    ids = sorted(df.sample_id.unique())[:int(round(share * df.sample_id.nunique()))]
    for sid in ids:
        rows = df.index[df.sample_id == sid]
        v = df.loc[rows, "logp_train"].to_numpy()
        df.loc[rows, "logp_train"] = (np.r_[v[1:], v[-1]] if lead else np.r_[v[0], v[:-1]])
    return df.to_dict("records")


def _plain(recs):
    return [{k: v for k, v in r.items() if not k.startswith("topk")} for r in recs]


# --- the section ------------------------------------------------------------------------------

def test_faults_first_and_folded(run):
    acc, d, recs = run
    scan = acc.folds["faults"].scan
    assert isinstance(scan, FaultScan) and scan.reg[0] == len(recs)
    assert SECTIONS[0] is SECTION and SECTION.figure is None
    assert d.summary["faults"] == [] and d.verdicts["faults"][0].startswith("none found")


# --- (a) log-probs above 0, (b) probabilities ---------------------------------------------------

def test_logprobs_above_zero_are_refused(capsys, tmp_path):
    """A log-prob above LOGP_TOL in either column is refused, naming file, column, the largest
    value and where; one above 1 stops the read at once."""
    bad = [dict(r) for r in GOOD]
    bad[7]["logp_train"] = 0.3
    f = write_jsonl(tmp_path / "a.jsonl", bad)
    err = _fails(capsys, tmp_path, f, match="column logp_train has 1 value(s) above 0")
    assert str(f) in err and "largest 0.3" in err and "position 2" in err
    bad = [dict(r) for r in GOOD]
    bad[3]["logp_rollout"] = 5.0
    _fails(capsys, tmp_path, write_jsonl(tmp_path / "b.jsonl", bad),
           match="column logp_rollout has at least 1 value(s) above 0 (largest 5")


def test_logprobs_near_zero_are_log_probs(tmp_path):
    """p close to 1: log-probs of 0, -1e-9 and float rounding up to +LOGP_TOL pass, in a column
    every value of which lies in [0, 1] (never taken for probabilities)."""
    recs = [dict(r) for r in GOOD]
    for i, r in enumerate(recs):
        r["logp_train"] = [0.0, -1e-9, 5e-5, -3e-7, 0.0][i % 5]
        r["logp_rollout"] = [0.0, 0.0, -1e-6, 1e-5, -2e-8][i % 5]
    d = run_diagnose([write_jsonl(tmp_path / "h.jsonl", recs)], tmp_path / "o")
    assert d.summary["tokens"] == len(recs) and d.summary["faults"] == []


def test_probabilities_in_place_of_log_probs_are_refused(capsys, tmp_path, engine_run):
    """Every value in [0, 1] and most above 0: a column of probabilities, named as the file
    names it (an engine dump's logp_roll)."""
    recs = [dict(r, logp_rollout=math.exp(r["logp_rollout"])) for r in GOOD]
    f = write_jsonl(tmp_path / "p.jsonl", recs)
    err = _fails(capsys, tmp_path, f, match="column logp_rollout holds probabilities, not "
                                           "log-probs (every value in [0, 1], 100% of 20 above 0)")
    assert str(f) in err and "write log(p)" in err
    df = engine_frame(engine_run)
    df["logp_roll"] = np.exp(df.logp_roll)
    df["log_rho"] = 0.0
    (tmp_path / "tokens").mkdir()
    df.to_parquet(tmp_path / "tokens" / "step_000000.parquet", index=False)
    _fails(capsys, tmp_path, tmp_path / "tokens", match="column logp_roll holds probabilities")


def test_a_few_probabilities_among_log_probs_are_log_probs_above_zero(capsys, tmp_path):
    """Half the values or fewer in (0, 1]: not the probabilities rule; refused as above 0."""
    recs = [dict(r) for r in GOOD]
    for r in recs[:5]:
        r["logp_train"] = 0.5
    _fails(capsys, tmp_path, write_jsonl(tmp_path / "m.jsonl", recs),
           match="column logp_train has 5 value(s) above 0")


# --- (c) off-by-one shift ---------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [0.03, 1.0])
def test_clean_dumps_show_no_shift_or_temperature(tmp_path, sigma):
    """A bf16-size mismatch (logit noise sd 0.03) and a large real one (sd 1): no fault."""
    recs, *_ = logit_tokens(sigma=sigma)
    d = diagnose_dumps([write_jsonl(tmp_path / "c.jsonl", _plain(recs))])
    assert d.summary["faults"] == []
    assert d.verdicts["faults"][0].startswith("none found")


def test_real_bf16_run_has_no_fault(engine_run):
    d = diagnose_dumps([engine_run])
    assert d.summary["faults"] == []


@pytest.mark.parametrize("lead, which", [(True, "logp_train[t] matches logp_rollout[t+1]"),
                                         (False, "logp_train[t+1] matches logp_rollout[t]")])
def test_off_by_one_shift_is_refused(capsys, tmp_path, lead, which):
    """The trainer's log-probs moved one position (a bf16-size mismatch underneath): the
    shifted pairing fits far better than the aligned one; refused with the fix."""
    recs, *_ = logit_tokens(sigma=0.03)
    f = write_jsonl(tmp_path / "s.jsonl", _shifted(_plain(recs), lead))
    err = _fails(capsys, tmp_path, f, match="logp_train is shifted by one position")
    assert which in err and str(f) in err
    assert ("logits[:, P-1:-1]" in err) == lead


def test_shift_in_part_of_the_responses_is_a_warning(tmp_path):
    """Two thirds of the responses shifted: the ratio lands between SHIFT_WARN and SHIFT_ERROR,
    a named warning in the report, summary.json and on the console."""
    recs, *_ = logit_tokens(sigma=0.03)
    f = write_jsonl(tmp_path / "w.jsonl", _shifted(_plain(recs), True, share=0.7))
    out = tmp_path / "o"
    assert main(["diagnose", str(f), "--out", str(out), "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    (fault,) = [x for x in s["faults"] if x["name"] == "shift"]
    assert fault["level"] == "warning"
    assert faults.SHIFT_WARN <= fault["stats"]["lead_ratio"] < faults.SHIFT_ERROR
    assert "may be shifted by one position" in (out / "report.html").read_text()


def test_shift_needs_enough_pairs():
    """Fewer than MIN_SHIFT_PAIRS adjacent pairs: not judged (GOOD's 16 pairs)."""
    scan = faults.FaultScan(["x"])
    scan.pairs[0] = [16, 16.0, 0.0, 16.0, 0.0]             # a perfect shift, but 16 pairs
    assert scan.shift() is None
    scan.pairs[0] = [faults.MIN_SHIFT_PAIRS, 50.0, 1.0, 50.0, 60.0]
    assert scan.shift().level == "error"


# --- (d) temperature ---------------------------------------------------------------------------

@pytest.mark.parametrize("temp", [0.7, 1.5])
def test_log_probs_at_two_temperatures_are_named(tmp_path, capsys, temp):
    """The sampler's log-probs at T (the trainer's at 1): a named warning with the likely
    temperature, and the bottom line says to fix it first."""
    recs, *_ = logit_tokens(sigma=0.03, temp_roll=temp)
    out = tmp_path / "o"
    assert main(["diagnose", str(write_jsonl(tmp_path / "t.jsonl", _plain(recs))), "--out",
                 str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    (fault,) = s["faults"]
    assert fault["name"] == "temperature" and fault["level"] == "warning"
    t = fault["stats"]["t_rollout"]
    assert (temp < t < 1) if temp < 1 else (1 < t < temp)   # toward the truth, biased to 1
    assert "different temperatures" in printed and f"T = {t:.2g}" in printed
    assert s["bottom_line"]["action"] == "fix_temperature"


def test_systematic_share_of_known_bins():
    """All of Delta a per-bin constant: share 1; pure noise of mean 0: about 0."""
    bins = dict(n=np.array([100.0, 100.0]), sum_d=np.array([10.0, -20.0]),
                sum_d2=np.array([1.0, 4.0]))
    assert faults.systematic_share(bins) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 1000))
    bins = dict(n=np.array([1000.0, 1000.0]), sum_d=x.sum(1), sum_d2=(x ** 2).sum(1))
    assert faults.systematic_share(bins) < 0.01


# --- (e) top-k lists that stop early ---------------------------------------------------------

def test_truncated_topk_rows_say_they_measure_the_mass_outside(tmp_path):
    """Top-5 lists of a 32-token vocabulary: the rows at rho 1e-8 and 1e-6 say their mass is
    the mass outside the lists; full lists say nothing of the kind."""
    recs, *_ = logit_tokens(k=5)
    d = diagnose_dumps([write_jsonl(tmp_path / "k.jsonl", recs)])
    rows = {ln.split(":")[0]: ln for ln in d.verdicts["dvp"][1:]}
    for rho in ("1e-08", "1e-06"):
        assert "the top-5 lists stop before this cut-off" in rows[f"rho = {rho}"]
        assert "not a bias of DVP" in rows[f"rho = {rho}"]
    assert d.summary["topk_k"] == [5, 5]
    recs, *_ = logit_tokens(k=None)
    d = diagnose_dumps([write_jsonl(tmp_path / "f.jsonl", recs)])
    assert not any("stop before" in ln or "upper bound" in ln for ln in d.verdicts["dvp"])
    assert "exact at every position" in d.verdicts["dvp"][0]


def test_truncation_note_levels():
    assert faults.truncation_note(1.0, 20, 20) == ""
    assert "not a bias" in faults.truncation_note(0.2, 20, 20)
    mild = faults.truncation_note(0.9, 20, 10)
    assert "upper bound at the 10% of positions" in mild and "top-10 to top-20" in mild
