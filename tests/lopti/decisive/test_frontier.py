"""The designs' frontier (``tailtheory/lopti/decisive/frontier.py``): each design's config and
warm start, the point it reports, and its figure."""

from __future__ import annotations

import matplotlib
import pytest

from provenance_check import check_named, tiny_model
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.lopti.decisive import frontier as df
from tests.lopti.decisive.test_report import _data

matplotlib.use("Agg")


def test_every_design_names_a_task_and_warm_start():
    c = df.frontier_config()
    assert set(c["designs"]) == set(df.DESIGNS) and len(set(c["designs"].values())) == 4
    cfg = df.design_config("kk_knights, 3 people")
    assert (cfg.task, cfg.n_people, cfg.temperature) == ("kk_knights", 3, 1.0)
    with pytest.raises(ValueError, match="unknown design"):
        df.design_config("sudoku")


def test_point_and_plot():
    p = df.point(_data())
    assert p["token_frac"] == pytest.approx(4 / 24)
    fig, table = df.plot_frontier({"a": p}, {"matched": p})
    assert list(table["kind"]) == ["design", "recipe"] and len(fig.axes) == 1


def test_each_design_names_its_warm_start(monkeypatch):
    """Each design's point names the warm start it measured and the machine (the warm starts
    and the probe stubbed: one tiny model per design)."""
    built = {name: tiny_model(i) for i, name in enumerate(df.DESIGNS)}
    monkeypatch.setattr(df, "load_start", lambda cfg: (
        built[next(n for n in df.DESIGNS if df.design_config(n) == cfg)], None))
    monkeypatch.setattr(df, "measure_decisiveness", lambda *a, **kw: _data())
    out = df.measure_frontier(progress=False)
    assert list(out) == list(df.DESIGNS)
    for name, entry in out.items():
        check_named(entry, weights_fingerprint(built[name]), machine())
