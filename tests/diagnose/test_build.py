"""The diagnosis built from the sums (``tailtheory.diagnose.build``): the keys of ``summary.json``
gathered from the sections and documented; TRM's keep of a response from its accumulated
statistic equals ``trm_mask`` on the whole log-ratios (T12)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from tailtheory.diagnose.build import RUN_KEYS, SUMMARY_KEYS, SUMMARY_ORDER, summary_keys
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.trm import accept
from tailtheory.trm.mask import trm_mask


def test_summary_keys_documented():
    """Every key of summary.json is defined in docs/diagnose.md, in the same words."""
    from tailtheory.core.io import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "diagnose.md").read_text()
    for key, text in SUMMARY_KEYS.items():
        assert f"| `{key}` | {text} |" in doc, key


def test_summary_keys_gathered_from_the_run_and_the_sections():
    """The schema is gathered from the records: the run's keys and each section's, every one
    once, in :data:`SUMMARY_ORDER` (which names every key of today's sections)."""
    named = [k for s in SECTIONS for k in s.summary]
    assert len(set(named)) == len(named) and not set(named) & set(RUN_KEYS)
    assert set(SUMMARY_KEYS) == set(RUN_KEYS) | set(named)
    assert tuple(SUMMARY_KEYS) == SUMMARY_ORDER
    assert all(SUMMARY_KEYS[k] == s.summary[k] for s in SECTIONS for k in s.summary)


def test_a_new_sections_keys_follow_and_a_key_written_twice_is_refused():
    """A section added to the list brings its keys with it (after the published ones); a key
    two records write, or an order naming a key nobody writes, is an error."""
    new = dataclasses.replace(SECTIONS[1], name="new", summary={"new_key": "what it holds"})
    keys = summary_keys((*SECTIONS, new))
    assert list(keys)[-1] == "new_key" and list(keys)[:-1] == list(SUMMARY_KEYS)
    twice = dataclasses.replace(new, summary={"k3": "again"})
    with pytest.raises(ValueError, match="'k3' of section 'new' is also written by section "
                                         "'envelope'"):
        summary_keys((*SECTIONS, twice))
    with pytest.raises(ValueError, match="also written by the run"):
        summary_keys((dataclasses.replace(new, summary={"files": "again"}),), order=())
    with pytest.raises(ValueError, match=r"names keys no section writes: \['gone'\]"):
        summary_keys(SECTIONS, order=(*SUMMARY_ORDER, "gone"))


@pytest.mark.parametrize("criterion, threshold", [("max", 0.05), ("avg", 0.01)])
def test_accept_equals_the_mask_on_whole_sequences(criterion, threshold):
    g = torch.Generator().manual_seed(0)
    log_rho = 0.2 * torch.randn(50, 9, generator=g, dtype=torch.float64)
    mask = torch.rand(50, 9, generator=g) < 0.8
    mask[:, 0] = True
    r = log_rho.exp()
    k2, k3 = 0.5 * log_rho ** 2, r - 1 - log_rho
    stat = (torch.where(mask, k2, 0).amax(-1) if criterion == "max" else
            torch.where(mask, k3, 0).sum(-1) / mask.sum(-1))
    kw = {"delta_max": threshold} if criterion == "max" else {"delta_avg": threshold}
    want = trm_mask(mask, criterion, log_ratio=torch.where(mask, log_rho, 0), **kw).numpy()
    got = accept(stat.numpy(), criterion, threshold)
    assert got.dtype == np.bool_ and 0 < got.sum() < len(got)
    assert np.array_equal(got, want)


def test_ratios_against_the_corrections_caps(engine_run, tmp_path):
    """The ratio section's numbers on a real bf16 run equal the engine's own corrections
    (TIS's weight, IcePop's keep, MIS's keep) applied to the whole dump, with the caps of
    MethodParams; k3 clamped to the band; ratios.png and ratios.csv written."""
    import json
    import math

    from tailtheory.diagnose.cli import run_diagnose
    from tailtheory.engine.types import MethodParams
    from tailtheory.tim.corrections import icepop_keep, mis_keep, tis_weight

    from .conftest import engine_frame

    hp = MethodParams()
    df = engine_frame(engine_run)
    df.loc[df.index[:3], "log_rho"] = [math.log(3.0), math.log(0.3), math.log(3.0)]
    (tmp_path / "tokens").mkdir()
    df.to_parquet(tmp_path / "tokens" / "step_000000.parquet", index=False)
    out = tmp_path / "o"
    run_diagnose([tmp_path / "tokens"], out)
    s = json.loads((out / "summary.json").read_text())
    lr = torch.tensor(df.log_rho.to_numpy().copy())
    assert s["ratio_caps"]["tis_cap"] == hp.tis_cap == 2.0
    assert (s["ratio_caps"]["band_low"], s["ratio_caps"]["band_high"]) == (0.5, 2.0)
    assert s["tis_truncated_frac"] == pytest.approx(
        (tis_weight(lr, hp.tis_cap) < lr.exp()).double().mean().item(), abs=1e-12)
    assert s["band_masked_frac"] == pytest.approx(
        (~icepop_keep(lr, hp.icepop_low, hp.icepop_high)).double().mean().item(), abs=1e-12)
    assert s["tis_truncated_frac"] == pytest.approx(2 / len(df))     # rho = 3, twice
    assert s["band_masked_frac"] == pytest.approx(3 / len(df))       # and rho = 0.3
    assert s["rho_mean"] == pytest.approx(lr.exp().mean().item(), rel=1e-12)
    assert s["rho_max"] == pytest.approx(3.0) and s["rho_min"] == pytest.approx(0.3)
    r = lr.clamp(math.log(0.5), math.log(2.0))
    assert s["k3_clamped"] == pytest.approx((r.exp() - 1 - r).mean().item(), rel=1e-9)
    assert s["k3_clamped"] < s["k3"]
    k3 = lr.exp() - 1 - lr
    out_band = (lr < math.log(0.5)) | (lr > math.log(2.0))
    assert s["k3_outside_share"] == pytest.approx((k3[out_band].sum() / k3.sum()).item())
    keys = df.groupby(["step", "seq"]).ngroup().to_numpy()
    seq = np.bincount(keys, weights=df.log_rho.to_numpy())
    x = torch.tensor(seq)[:, None]
    mask = torch.ones_like(x, dtype=torch.bool)
    want = (~mis_keep(x, mask, hp.mis_low, hp.mis_high)).double().mean().item()
    assert s["seq_masked_frac"] == pytest.approx(want, abs=1e-12) and want > 0
    assert (out / "ratios.png").is_file()
    csv = pd.read_csv(out / "ratios.csv")
    row = csv[np.isclose(csv.c, 2.0)].iloc[0]
    assert row.frac_rho_above_c == pytest.approx(2 / len(df))
    assert row.frac_rho_below_1_over_c == pytest.approx(1 / len(df))


def test_ratios_of_a_clean_dump_truncate_nothing(tmp_path):
    from tailtheory.diagnose.cli import diagnose_dumps

    from .conftest import write_jsonl
    from .test_read import GOOD

    d = diagnose_dumps([write_jsonl(tmp_path / "g.jsonl", GOOD)])
    s = d.summary
    assert s["tis_truncated_frac"] == 0 and s["band_masked_frac"] == 0
    assert s["k3_clamped"] == pytest.approx(s["k3"], rel=1e-12)       # nothing to clamp
    assert "truncates 0% of tokens" in d.verdicts["ratios"][1]
