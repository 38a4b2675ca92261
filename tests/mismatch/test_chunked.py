"""Tests of tailtheory.mismatch.chunked: M7 one chunk of positions at a time, against the
whole-tensor reference of tailtheory.mismatch.real (STYLE rule 6).

Two equalities, each with its tolerance (rule 20):

- the chunked logits against ``paired_logits``: float32 rounding on the trainer and ``kv``
  sides (the head's product on a chunk, not the whole batch: ``rtol 1e-5`` of the logits'
  scale); on the 16-bit copies one rounding of the copy's dtype may differ (``atol`` = the
  dtype's spacing at the logits' largest magnitude);
- the statistics folded in over chunks against ``mismatch_envelope`` on the same logits:
  float64 sums in another order, 1e-12 relative (counts and maxima exact, up to a token that
  sits within a last bit of a bound).
"""

import pandas as pd
import pytest
import torch

from tailtheory.mismatch import chunked as mc
from tailtheory.mismatch import real as rm
from tailtheory.mismatch.figures import plot_mismatch_points

V, B, T = 512, 3, 10


@pytest.fixture(scope="module")
def model():
    return rm.m7_model(V, hidden=64, layers=2)


@pytest.fixture(scope="module")
def ids():
    return rm.random_input_ids(V, B, T, seed=1)


def _cat(chunks):
    parts = list(chunks)
    assert [r.start for r, _, _ in parts] == sorted(r.start for r, _, _ in parts)
    return (torch.cat([z for _, z, _ in parts]).view(B, T, -1),
            torch.cat([zi for _, _, zi in parts]).view(B, T, -1))


@pytest.mark.parametrize("path", rm.PATHS)
def test_chunked_logits_equal_paired_logits(model, ids, path):
    """M7: each side's chunks are paired_logits' rows (tolerances in the module docstring)."""
    ref, ref_inf = rm.paired_logits(model, ids, path)
    z, zi = _cat(mc.paired_logit_chunks(model, ids, path, rows=4))
    assert z.dtype == zi.dtype == torch.float32
    scale = float(ref.abs().max())
    torch.testing.assert_close(z.double(), ref, rtol=0, atol=1e-5 * scale)
    spacing = {"bf16": 2.0 ** -7, "fp16": 2.0 ** -10, "fp8": 2.0 ** -7}.get(path, 1e-5)
    torch.testing.assert_close(zi.double(), ref_inf, rtol=0, atol=spacing * scale)


def test_kv_mismatch_survives_chunking(model, ids):
    """The kv mismatch is float32 rounding itself; chunking changes it only at that scale."""
    ref = rm.mismatch_envelope(*rm.paired_logits(model, ids, "kv"))[0]
    s, _ = mc.envelope_from_chunks(mc.paired_logit_chunks(model, ids, "kv"), B * T, V)
    assert s["max_abs"] < 1e-4 and abs(s["mean_abs"] - ref["mean_abs"]) < 1e-6


@pytest.mark.parametrize("path", ["bf16", "fp16", "kv"])
def test_envelope_from_chunks_equals_mismatch_envelope(model, ids, path):
    """M7: the chunked summary is mismatch_envelope's on the same logits, the points are
    mismatch_tokens' rows: every head token (p > 0.01), then sampled tail tokens."""
    z, zi = rm.paired_logits(model, ids, path)
    chunks = ((slice(r, r + 7), z.view(B * T, V)[r:r + 7].float(), zi.view(B * T, V)[r:r + 7]
               .float()) for r in range(0, B * T, 7))
    zf, zif = z.float().double(), zi.float().double()        # what the float32 chunks hold
    ref, _ = rm.mismatch_envelope(zf, zif)
    s, pts = mc.envelope_from_chunks(chunks, B * T, V, max_points=300, seed=3)
    assert set(s) == set(ref)
    for k, v in ref.items():
        assert s[k] == pytest.approx(v, rel=1e-12, abs=1e-300, nan_ok=True), k
    tok = {k: v.reshape(B * T, V) for k, v in rm.mismatch_tokens(zf, zif).items()}
    head = (tok["p"] > mc.POINT_HEAD_P).nonzero()
    n_head = len(head)
    assert n_head > 0 and pts[["position", "token"]].iloc[:n_head].values.tolist() == \
        head.tolist()
    assert (pts.p.iloc[n_head:] <= mc.POINT_HEAD_P).all() and len(pts) - n_head > 200
    at = (torch.tensor(pts.position.values), torch.tensor(pts.token.values))
    for c in ("p", "abs_Delta", "bound_exact", "bound_first"):
        torch.testing.assert_close(torch.tensor(pts[c].values), tok[c][at], rtol=1e-12,
                                   atol=1e-300)
    torch.testing.assert_close(torch.tensor(pts.eps.values), tok["eps"][at], rtol=1e-12, atol=0)


def test_chunk_tokens_falls_back_beyond_expm1s_range():
    """eps > ~355: the exact bound's logaddexp form, as mismatch_bound computes it."""
    z = torch.zeros(2, 5)
    zi = torch.tensor([[0.0, 800, 0, 0, 0], [0, 0, 0, 0, 1.0]])
    tok = mc.chunk_tokens(z, zi)
    ref = rm.mismatch_tokens(z[None].double(), zi[None].double(), "position")
    for k in ("p", "abs_Delta", "bound_exact", "bound_first", "bound_linear"):
        torch.testing.assert_close(tok[k], ref[k][0])
    assert torch.isfinite(tok["bound_exact"]).all()


def test_mismatch_probe_table_and_figure(model, ids):
    """The probe's summary has one row per path; its points draw the notebook's figure."""
    summary, points = mc.mismatch_probe(model, ids, max_points=200)
    assert summary.path.tolist() == ["bf16", "fp16", "kv"] and (summary.note == "").all()
    assert (summary.frac_under_exact == 1.0).all()
    assert list(points.columns) == ["label", *mc.POINT_COLUMNS]
    fig, df = plot_mismatch_points(points)
    assert len(fig.axes) == 3 and df.equals(points)


def test_overflowing_path_is_a_note_not_a_failure(model, ids, monkeypatch):
    """fp16 logits that overflow: that path's row says so, the others are measured."""
    real = mc.paired_logit_chunks

    def overflow(model, ids, path="bf16", *a, **k):
        if path == "fp16":
            raise mc.NonFiniteLogits("the fp16 path gives non-finite logits")
        return real(model, ids, path, *a, **k)

    monkeypatch.setattr(mc, "paired_logit_chunks", overflow)
    summary, points = mc.mismatch_probe(model, ids, max_points=50)
    row = summary.set_index("path").loc["fp16"]
    assert "non-finite" in row.note and pd.isna(row.mean_abs)
    assert set(points.label) == {"bf16", "kv"}


def test_bad_input(model, ids):
    with pytest.raises(ValueError, match="path must be one of"):
        next(mc.paired_logit_chunks(model, ids, "int4"))
    with pytest.raises(ValueError, match="must lie in"):
        next(mc.paired_logit_chunks(model, ids + V, "bf16"))
    with pytest.raises(ValueError, match="float32 trainer"):
        next(mc.paired_logit_chunks(rm.m7_model(V, hidden=32, layers=1).half(), ids, "bf16"))
