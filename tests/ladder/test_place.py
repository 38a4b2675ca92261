"""The run's k3 beside GRPO's threshold at the model-size ladder's nearest rung
(``tailtheory.ladder.place``): the rung chosen by log parameters, each placement on a
hand-made transfer, a rung without a threshold said so with the study's state, bad --params
refused before anything is read, and the line in the command's output."""

from __future__ import annotations

import json

import pytest

from tailtheory.cli import main
from tailtheory.ladder.place import (PLACEMENTS, ladder_lines, ladder_placement,
                                              nearest_rung, rung_sizes)

from tests.diagnose.conftest import write_jsonl
from tests.diagnose.test_read import GOOD, _fails

SIZES = {"base": 1_000_000, "w256": 8_000_000}


def test_nearest_rung_in_log_parameters():
    assert nearest_rung(None, SIZES) == "w256"                  # no count: the largest rung
    assert nearest_rung(1.5e9, SIZES) == "w256"
    assert nearest_rung(1e6, SIZES) == "base"
    assert nearest_rung(2.5e6, SIZES) == "base"                 # log: 2.5x below 3.2x above
    assert nearest_rung(2 ** 0.5 * 2e6, SIZES) == "w256"        # the geometric middle: larger
    for bad in (0, -5, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="--params must be a positive number"):
            nearest_rung(bad, SIZES)
    sizes = rung_sizes()
    assert set(sizes) == {"base", "w256"} and sizes["base"] < sizes["w256"]


TRANSFER = {"verdict": "STAYS", "intervals": {"base": (0.065, 0.19), "w256": (0.02, 0.065)}}


@pytest.mark.parametrize("k3, params, rung, placement", [
    (0.01, None, "w256", "below_safe"),
    (0.03, 2e9, "w256", "between"),
    (0.065, 2e9, "w256", "at_or_above_harm"),
    (0.1, 1e6, "base", "between"),
    (0.05, 1e6, "base", "below_safe"),
])
def test_each_placement(k3, params, rung, placement):
    lp = ladder_placement(k3, params, TRANSFER, SIZES)
    assert (lp["rung"], lp["placement"]) == (rung, placement)
    assert lp["interval"] == TRANSFER["intervals"][rung]
    line = " ".join(ladder_lines(lp))
    assert f"is {rung} ({SIZES[rung]:,} parameters)" in line
    assert PLACEMENTS[placement].split(":")[0] in line
    assert ("--params N" in line) == (params is None)


def test_a_rung_without_threshold_names_the_studys_state():
    pending = {"verdict": "PENDING (22 of 22 runs missing: tailtheory study dose_ladder)",
               "intervals": {}}
    lp = ladder_placement(0.01, 3e9, pending, SIZES)
    assert lp["placement"] == "no_threshold" and lp["interval"] is None
    line = ladder_lines(lp)[0]
    assert "no threshold measured there yet" in line and "tailtheory study dose_ladder" in line
    only_base = {"verdict": "UNDETERMINED", "intervals": {"base": (0.02, 0.065)}}
    assert ladder_placement(0.01, 3e9, only_base, SIZES)["placement"] == "no_threshold"


def test_the_command_shows_the_ladder_line_and_refuses_bad_params(tmp_path, capsys):
    f = write_jsonl(tmp_path / "d.jsonl", GOOD)
    assert main(["diagnose", str(f), "--out", str(tmp_path / "a"), "--quiet",
                 "--params", "1.5e9"]) == 0
    out = capsys.readouterr().out
    assert "[register] on the model-size ladder, the rung nearest this run's 1.5e+09" in out
    stored = json.loads((tmp_path / "a" / "register.json").read_text())
    assert stored["ladder"]["rung"] == "w256" and stored["ladder"]["params"] == 1.5e9
    _fails(capsys, tmp_path, f, "--params", "-1", match="--params must be a positive number")
