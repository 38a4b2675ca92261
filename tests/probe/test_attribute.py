"""tailtheory.probe.attribute: ``probe mismatch --attribute``, each knob's mismatch against one
reference on a tiny model.

What is equal (rule 20): only the ``reference`` arm, the same function on the same shapes, is
bitwise equal (k3 = 0 exactly); every other arm is a measurement, checked by floors near zero
and orderings that hold on any CPU (bf16's rounding, 2^-8, against float32's reduction order),
never against a stored number. The statistics folded in by chunks equal the whole-tensor
functions on the same logits (``shape_stats``, ``envelope_slope``) to float64 rounding.
"""

import contextlib
import io
import json
import math

import pandas as pd
import pytest
import torch

from tailtheory.cli import main
from tailtheory.core.models import tiny_lm
from tailtheory.mismatch import real as rm
from tailtheory.mismatch.batch_shape import shape_stats
from tailtheory.mismatch.claims import envelope_slope
from tailtheory.probe import attribute as pa
from tailtheory.probe.run import ATTRIBUTE, ProbeConfig, out_files, record_name

B, L = 2, 16
SMALL = ["--device", "cpu", "--batch", str(B), "--length", str(L)]
ARMS = ["reference", "bf16", "kv", "batch8", "batch32", "sdpa", "combined", "fp16", "residual"]

FLOAT32_FLOOR = 1e-8
"""Ceiling of a float32 knob's k3 (kv, batch shape, sdpa): their log-ratios are float32
reduction-order differences, ~1e-6 at most on this model, so k3 ~ 1e-12; bf16's is ~1e-7."""


@pytest.fixture(scope="module")
def run(user_ckpt, tmp_path_factory):
    """One whole ``probe mismatch --attribute`` run of the tiny checkpoint (exit status, folder,
    printed text)."""
    out = tmp_path_factory.mktemp("attr") / "out"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["probe", "mismatch", "--attribute", "--model", str(user_ckpt), *SMALL,
                     "--out", str(out)])
    return code, out, buf.getvalue()


def test_the_run_writes_its_table_figure_and_record(run):
    code, out, printed = run
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(out_files(ATTRIBUTE))
    assert "mismatch_attribute probe of" in printed and "residual" in printed
    rec = json.loads((out / record_name(ATTRIBUTE)).read_text())
    assert rec["config"]["attribute"] is True and rec["config"]["attention"] == "sdpa"
    assert [r["arm"] for r in rec["result"]["table"]] == ARMS
    assert rec["result"]["reference"] == pa.REFERENCE
    assert (out / "mismatch_attribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_holds_every_arm_and_the_reference_is_its_own_floor(run):
    """The columns and arms; the reference against itself is 0 exactly (same function, same
    shapes); bf16 is above every float32 knob, those are near zero, fp16 is measured."""
    t = pd.read_csv(run[1] / "mismatch_attribution.csv", keep_default_na=False,
                    na_values=[""]).set_index("arm")
    assert list(t.reset_index().columns) == list(pa.COLUMNS) and list(t.index) == ARMS
    arms = t.drop(index="residual")
    assert (arms.note.fillna("") == "").all() and (arms.tokens == B * (L - 1)).all()
    ref = t.loc["reference"]
    assert ref.k3 == 0 and ref.max_abs == 0 and ref.equal == 1 and ref.outside_tokens == 0
    assert t.loc["bf16", "k3"] > 0 and t.loc["fp16", "k3"] > 0 and t.loc["combined", "k3"] > 0
    for knob in ("kv", "batch8", "batch32", "sdpa"):
        assert 0 <= t.loc[knob, "k3"] < FLOAT32_FLOOR, knob
        assert t.loc["bf16", "k3"] > t.loc[knob, "k3"], knob
    assert ((arms.outside_low <= arms.outside) & (arms.outside <= arms.outside_high)).all()
    assert (arms.outside_tokens == (arms.outside * arms.tokens).round()).all()


def test_the_residual_is_the_combination_minus_its_knobs(run):
    """The record's table (full precision; the CSV keeps 8 digits)."""
    rec = json.loads((run[1] / record_name(ATTRIBUTE)).read_text())
    t = pd.DataFrame(rec["result"]["table"]).set_index("arm")
    knobs = sum(t.loc[k, "k3"] for k in ("bf16", "kv", "batch32", "sdpa"))
    assert t.loc["residual", "k3"] == pytest.approx(t.loc["combined", "k3"] - knobs,
                                                    rel=1e-9, abs=1e-15)
    assert t.loc["residual", "k3_se"] > 0


def test_folding_by_chunks_equals_the_whole_tensor_functions():
    """M7: the chunked fold gives shape_stats of the observed tokens' log rho and M7's
    envelope_slope of the same logits (float64: the same sums in the same order)."""
    model = rm.m7_model(512, hidden=64)
    ids = rm.random_input_ids(512, 1, 64, seed=0)       # enough head tokens for 3 bins of M7
    z, zi = (x[0].float() for x in rm.paired_logits(model, ids, "bf16"))     # (L, V) float32
    fold, w = pa.ArmFold(), ids[0]
    for r0 in range(0, 64, 7):
        r = slice(r0, min(64, r0 + 7))
        fold.add(r, z[r], zi[r], w)
    row, tok = fold.row()
    lp, lpi = torch.log_softmax(z.double(), -1), torch.log_softmax(zi.double(), -1)
    log_rho = (lp - lpi)[torch.arange(63), w[1:]]                            # ref - arm
    st = shape_stats(log_rho)
    for k in ("tokens", "k3", "outside", "equal", "over_1e3", "max_abs"):
        assert row[k] == pytest.approx(st[k], rel=1e-12, abs=1e-300), k
    slope, bins = envelope_slope(z[None].double(), zi[None].double())
    assert bins >= 3 and math.isfinite(slope)
    assert (row["m7_slope"], row["m7_bins"]) == (pytest.approx(slope, rel=1e-12), bins)
    assert float(tok.mean()) == pytest.approx(row["k3"], rel=1e-12)


def test_a_model_without_sdpa_reports_that_arm_as_not_available(monkeypatch):
    model = tiny_lm(vocab_size=256, hidden=32)
    monkeypatch.setattr(type(model), "_supports_sdpa", False)
    t = pa.attribute_mismatch(model, rm.random_input_ids(256, 1, 8, seed=0)).set_index("arm")
    for arm in ("sdpa", "combined", "residual"):
        assert t.loc[arm, "note"].startswith("not available"), arm
        assert math.isnan(t.loc[arm, "k3"])
    assert t.loc["bf16", "k3"] > 0 and t.loc["reference", "k3"] == 0


def test_the_attention_arm_runs_a_copy():
    model = tiny_lm(vocab_size=256, hidden=32)
    m = pa.with_attention(model, "sdpa")
    assert m.config._attn_implementation == "sdpa" and model.config._attn_implementation == "eager"
    with pytest.raises(ValueError, match="eager"):
        pa.attribute_mismatch(m, rm.random_input_ids(256, 1, 8))
    with pytest.raises(ValueError, match="unknown attention implementation 'flash'"):
        pa.arms("flash")


def test_batch_rows_are_other_windows_some_longer_than_the_probed_one():
    ids = rm.random_input_ids(256, 3, 20, seed=1)
    rows = pa.fillers(ids, 8, seed=0, max_len=64)
    assert len(rows) == 3 and all(len(r) == 7 for r in rows)
    lens = [len(x) for r in rows for x in r]
    assert min(lens) >= 10 and max(lens) <= 30 and max(lens) > 20
    assert pa.fillers(ids, 8, seed=0, max_len=64) == rows != pa.fillers(ids, 8, 1, 64)
    assert max(len(x) for r in pa.fillers(ids, 32, 0, max_len=22) for x in r) <= 22


def test_the_residual_row_is_the_paired_difference_per_token():
    g = torch.Generator().manual_seed(0)
    tok = {a: torch.rand(50, generator=g, dtype=torch.float64) for a in
           ("bf16", "kv", "batch32", "sdpa", "combined")}
    row = pa.residual_row(tok, "sdpa")
    diff = tok["combined"] - tok["bf16"] - tok["kv"] - tok["batch32"] - tok["sdpa"]
    assert row["k3"] == pytest.approx(float(diff.mean()), rel=1e-12)
    assert row["k3_se"] == pytest.approx(float(diff.std()) / math.sqrt(50), rel=1e-12)
    assert pa.residual_row({**tok, "kv": None}, "sdpa")["note"].startswith("not available")


def test_config_and_bad_input_are_one_line(user_ckpt, tmp_path, capsys):
    """--attribute on another family (decisiveness too), an unknown attention kernel,
    --attention without --attribute, a checkpoint path missing: exit 2, one line, nothing
    written."""
    cfg = ProbeConfig("mismatch", "m", attribute=True)
    assert cfg.attention == "sdpa" and cfg.output == ATTRIBUTE
    ckpt = str(user_ckpt)
    cases = {"--attribute is an option of the mismatch probe, not of pruning":
             ["pruning", "--model", ckpt, "--attribute"],
             "not of decisiveness": ["decisiveness", "--model", ckpt, "--attribute"],
             "unknown attention implementation 'flash'; valid: sdpa":
             ["mismatch", "--model", ckpt, "--attribute", "--attention", "flash"],
             "add --attribute": ["mismatch", "--model", ckpt, "--attention", "sdpa"],
             "does not exist": ["mismatch", "--attribute", "--model", str(tmp_path / "none")]}
    for expected, argv in cases.items():
        assert main(["probe", *argv, *SMALL, "--out", str(tmp_path / "out")]) == 2, expected
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, (expected, err)
    assert not (tmp_path / "out").exists()
