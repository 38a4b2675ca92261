"""The run's mean k3 on the dose-response register (``tailtheory.diagnose.sections.register``,
V6): every placement on hand-made registers built by ``tailtheory.tim.dose.register_table``,
what is not determined said so without a number, bad input refused, and the section in the
report (its lines and ``register.json``, written only for a placed run) and the command's
output."""

from __future__ import annotations

import json
import math

import pytest

from tailtheory.cli import main
from tailtheory.diagnose.cli import run_diagnose
from tailtheory.diagnose.sections import register as reg
from tailtheory.diagnose.sections.base import Diagnosis
from tailtheory.diagnose.sections.register import (CAVEAT, PLACEMENTS, SECTION, place_on_register,
                                                   placement_lines, register_section)
from tailtheory.tim import dose

from ..conftest import write_jsonl
from ..test_read import GOOD

SAFE, HURT = (0.63, 0.62, 0.64), (0.40, 0.42, 0.41)
R = f"logit sigma={dose.REMEDY_SIGMA:g}"


def _row(seed, acc, k3, fmt):
    return {"seed": seed, "final_eval": acc, "final_reward": acc, "k3": [k3, k3 * 1.5],
            "format": [fmt, fmt]}


def _data(points, exact=(0.62, 0.63, 0.64, 0.63, 0.62)):
    """``points``: label -> (accuracies over seeds, k3, format); a run's k3 is 1.25 x its
    ``k3`` (the mean of ``[k3, 1.5 k3]``). Returns the dose study's data of those runs."""
    data = {"GRPO | exact": [_row(s + 1, a, 0.0, 0.9) for s, a in enumerate(exact)]}
    for label, (accs, k3, fmt) in points.items():
        data[label] = [_row(s + 1, a, k3, fmt) for s, a in enumerate(accs)]
    return data


def _register(points, exact=(0.62, 0.63, 0.64, 0.63, 0.62)):
    """``register_table`` of :func:`_data`."""
    return dose.register_table(_data(points, exact))


THRESHOLD = {"GRPO | logit sigma=0.3": (SAFE, 1e-4, 0.9),
             "GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),        # k3_safe = 1.25e-3
             "GRPO | logit sigma=2": (HURT, 1e-2, 0.9),        # k3_harm = 1.25e-2
             "GRPO | logit sigma=4": (HURT, 1e-1, 0.9)}
FULL = _register({**THRESHOLD, f"TIS | {R}": (SAFE, 1.1e-2, 0.9),
                  f"MIS | {R}": (HURT, 1.1e-2, 0.9), f"IcePop | {R}": ((0.6, 0.61), 1.1e-2, 0.9),
                  "GRPO | fp8 bypass": (SAFE, 2e-4, 0.9),
                  "GRPO | bf16 recompute": (SAFE, 4e-6, 0.9)})


def _text(p: dict) -> str:
    lines = placement_lines(p)
    assert lines[-1] == f"caveat: {CAVEAT}"                     # always, whatever the placement
    assert "0.7M-parameter" in lines[-1] and "kk_trace" in lines[-1]
    return "\n".join(lines)


@pytest.mark.parametrize("k3, where", [
    (0.0, "below_safe"), (1e-4, "below_safe"), ("safe", "below_safe"),  # k3_safe itself: safe
    (5e-3, "between"), ("harm", "at_or_above_harm"), (0.5, "at_or_above_harm"),
    (math.inf, "at_or_above_harm")])
def test_each_placement_against_the_threshold(k3, where):
    grpo = next(r for r in FULL if r["method"] == "grpo" and r["kind"] == "logit")
    p = place_on_register(grpo.get(f"k3_{k3}", k3), FULL)
    assert p["placement"] == where and p["reason"] == ""
    assert p["k3_safe"] == pytest.approx(1.25e-3) and p["k3_harm"] == pytest.approx(1.25e-2)
    assert p["sigma_harm"] == 2 and p["monotone"] is True and p["pending"] == []
    text = _text(p)
    assert {"below_safe": "below k3_safe = 0.0013", "between": "between k3_safe = 0.0013 and "
            "k3_harm = 0.013", "at_or_above_harm": "at or above k3_harm = 0.013"}[where] in text
    assert ("no harm measurable at toy scale" in text) == (where == "below_safe")
    assert "real rollout paths on the same axis (k3): fp8 bypass 0.00025 (not harmed); " \
           "bf16 recompute 5e-06 (not harmed)" in text


def test_a_real_path_harmed_below_k3_safe_is_named_under_below_safe():
    """A real path harmed at a k3 under k3_safe: the placement says the run is not safe by its
    k3 alone (it is not named when the path is unharmed, as in FULL)."""
    hurt = _register({**THRESHOLD, "GRPO | fp8 bypass": (HURT, 2e-4, 0.9)})
    text = _text(place_on_register(1e-4, hurt))
    assert "below k3_safe = 0.0013" in text
    assert "but the real path fp8 bypass was harmed at k3 = 0.00025, below k3_safe" in text
    assert "but the real path" not in _text(place_on_register(1e-4, FULL))
    # register_text says it too, and only for the harmed path
    words = dose.register_text(_data({**THRESHOLD, "GRPO | fp8 bypass": (HURT, 2e-4, 0.9),
                                      "GRPO | bf16 recompute": (SAFE, 4e-6, 0.9)}))
    assert [w for w in words if w.startswith("but ")] == [
        "but real path fp8 bypass was harmed at k3 = 0.00025, below k3_safe = 0.0013: k3 alone "
        "does not place a run of that path"]


def test_harm_lists_the_remedies_measured_there():
    p = place_on_register(0.02, FULL)
    moves = {r["method"]: r["moves_threshold"] for r in p["remedies"]}
    assert moves == {"tis": True, "mis": False, "icepop": None}
    text = _text(p)
    assert "GRPO was harmed at this mismatch at toy scale" in text
    assert (f"remedies measured there (logit sigma = {dose.REMEDY_SIGMA:g}): TIS moves the "
            "threshold (not harmed); MIS does not move it (harmed); IcePop not measured yet "
            "(fewer than 3 seeds)") in text
    alone = _text(place_on_register(0.02, _register(THRESHOLD)))
    assert "remedies measured there: none measured yet" in alone
    assert "real rollout paths on the same axis (k3): none measured yet" in alone


def test_pending_threshold_is_not_determined_and_names_no_number():
    pend = _register({"GRPO | logit sigma=1": (SAFE[:2], 1e-3, 0.9),
                      "GRPO | logit sigma=2": (HURT[:1], 1e-2, 0.9)})
    p = place_on_register(1e-3, pend)
    assert p["placement"] == "undetermined" and p["pending"] == [1, 2]
    assert math.isnan(p["k3_safe"]) and math.isnan(p["k3_harm"])
    text = _text(p)
    assert "not determined yet" in text and "1, 2 still lack seeds" in text
    assert "k3_safe =" not in text and "k3_harm =" not in text and "nan" not in text
    part = _register({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),
                      "GRPO | logit sigma=2": (HURT[:2], 1e-2, 0.9)})
    p = place_on_register(2e-3, part)
    assert p["placement"] == "undetermined" and p["k3_safe"] == pytest.approx(1.25e-3)
    assert "No harm measured so far up to k3 = 0.0013; this run is above it." in _text(p)
    for empty in ([], [r for r in FULL if r["method"] != "grpo" or r["kind"] != "logit"]):
        p = place_on_register(1e-3, empty)
        assert p["placement"] == "undetermined"
        assert "no GRPO logit-noise point is stored yet" in _text(p)


def test_pending_sigma_above_the_threshold_is_noted():
    points = {**THRESHOLD, "GRPO | logit sigma=4": ((0.3,), 1e-1, 0.9)}
    p = place_on_register(1e-4, _register(points))
    assert p["placement"] == "below_safe" and p["pending"] == [4]
    assert "sigmas still pending: 4 (the thresholds may move)" in _text(p)


def test_no_threshold_cases():
    mixed = _register({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),
                       "GRPO | logit sigma=2": (HURT, 1e-2, 0.9),
                       "GRPO | logit sigma=4": (SAFE, 1e-1, 0.9)})
    p = place_on_register(0.5, mixed)
    assert p["placement"] == "undetermined" and p["monotone"] is False
    assert "not monotone" in _text(p)
    first = _register({"GRPO | logit sigma=1": (HURT, 1e-3, 0.9)})       # harmed at once
    assert place_on_register(2e-3, first)["placement"] == "at_or_above_harm"
    p = place_on_register(1e-4, first)
    assert p["placement"] == "undetermined" and "smallest sigma" in p["reason"]
    calm = _register({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),
                      "GRPO | logit sigma=2": (SAFE, 1e-2, 0.9)})     # no harm anywhere
    assert place_on_register(1e-2, calm)["placement"] == "below_safe"
    p = place_on_register(0.1, calm)
    assert p["placement"] == "beyond_sweep"
    assert "above k3 = 0.013, the largest mismatch" in _text(p)
    ill = _register({"GRPO | logit sigma=1": (SAFE, 1e-3, 0.9),
                     "GRPO | logit sigma=2": (HURT, 1e-2, 0.1)})
    assert "ill-formed" in _text(place_on_register(0.1, ill))
    assert set(PLACEMENTS) >= {"below_safe", "between", "at_or_above_harm", "beyond_sweep",
                               "undetermined", "unavailable"}


@pytest.mark.parametrize("bad, match", [(-1e-3, "must be >= 0"), (math.nan, "must be >= 0"),
                                        (-math.inf, "must be >= 0"), ("0.1", "must be a number"),
                                        (None, "must be a number"), (True, "must be a number")])
def test_bad_k3_is_a_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        place_on_register(bad, FULL)


def test_missing_store_is_unavailable_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    p = place_on_register(1e-3)
    assert p["placement"] == "unavailable" and "no stored measurement" in p["reason"]
    text = _text(p)
    assert "register (V6) is unavailable" in text and "no threshold is given" in text


def test_stored_register_places_or_says_why():
    """The checkout's stored register (complete, partial or stale): always a placement, and a
    threshold named only where it is measured."""
    p = place_on_register(1e-3)
    assert p["placement"] in PLACEMENTS
    if p["placement"] in ("undetermined", "unavailable"):
        assert p["reason"]
    else:
        assert math.isfinite(p["k3_safe"]) or math.isfinite(p["k3_harm"])
    _text(p)


def test_section_on_a_nan_k3():
    d = Diagnosis(summary={"k3": math.nan})
    register_section(d, FULL)
    assert "cannot be placed" in d.verdicts["register"][0] and "register" not in d.points


def test_report_and_command_show_the_placement(tmp_path, monkeypatch, capsys):
    """The section in ``report.html``, ``register.json`` and the printed lines, from the run's
    summary k3 (token-weighted: about 5e-5 for GOOD's log rho of +-0.01)."""
    f = write_jsonl(tmp_path / "d.jsonl", GOOD)
    d = run_diagnose([f], tmp_path / "a", register=FULL)
    k3 = d.summary["k3"]
    assert k3 == pytest.approx(0.01 ** 2 / 2, rel=1e-2)
    assert d.points["register"]["mean_k3"] == k3
    assert d.points["register"]["placement"] == "below_safe"
    stored = json.loads((tmp_path / "a" / "register.json").read_text())
    assert stored["placement"] == "below_safe" and stored["k3_harm"] == pytest.approx(1.25e-2)
    html = (tmp_path / "a" / "report.html").read_text()
    assert "dose-response register" in html and "no harm measurable at toy scale" in html
    assert "0.7M-parameter" in html
    low = _register({"GRPO | logit sigma=1": (SAFE, 1e-8, 0.9),
                     "GRPO | logit sigma=2": (HURT, 1e-6, 0.9), f"TRM | {R}": (SAFE, 1e-6, 0.9)})
    monkeypatch.setattr(reg, "load_register", lambda: (low, {"GRPO | weight sigma=1": [1, 2, 3]}))
    assert main(["diagnose", str(f), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"[register] mean per-token k3 of this run: {k3:.3g}" in out
    assert "[register] at or above k3_harm = 1.2e-06" in out and "TRM moves the threshold" in out
    assert "the register is partial: 1 arm(s) lack stored seeds (GRPO | weight sigma=1)" in out
    assert f"[register] caveat: {CAVEAT}" in out
    monkeypatch.undo()                                     # the real loader, on an empty store
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "none"))
    assert main(["diagnose", str(f), "--out", str(tmp_path / "c"), "--quiet"]) == 0
    assert "[register] the dose-response register (V6) is unavailable" in capsys.readouterr().out


def test_register_lines_and_file(run):
    acc, d, recs = run
    assert d.points["register"]["mean_k3"] == d.summary["k3"]
    placed = json.loads(SECTION.files(d)["register.json"])
    assert placed["mean_k3"] == d.summary["k3"] and d.verdicts["register"][-1].startswith("caveat")
    assert SECTION.files(Diagnosis(summary={})) == {}
