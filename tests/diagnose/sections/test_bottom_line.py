"""The bottom line (``tailtheory.diagnose.sections.bottom_line``): last, one line, in the summary
too, always with the caveat of scale; each action from the run's place on hand-made registers
(those of ``test_register``) and the faults found."""

import json
import math

from tailtheory.cli import main
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.base import Diagnosis
from tailtheory.diagnose.sections.bottom_line import ACTIONS, SECTION, SOURCE_FIX, bottom_line
from tailtheory.diagnose.sections.faults import Fault
from tailtheory.diagnose.sections.register import register_section

from ..conftest import write_jsonl
from ..test_read import GOOD
from .test_register import FULL, HURT, R, THRESHOLD, _register


def test_bottom_line_last(run):
    acc, d, recs = run
    assert SECTIONS[-1] is SECTION and list(d.verdicts)[-1] == "bottom_line"
    assert d.summary["bottom_line"]["action"] in ACTIONS
    assert d.verdicts["bottom_line"] == [d.summary["bottom_line"]["text"]]
    assert "caveat" in d.summary["bottom_line"]["text"]


def _bottom(k3, register, faults=()):
    d = Diagnosis(summary={"k3": k3})
    d.points["faults"] = list(faults)
    register_section(d, register)
    out = bottom_line(d)
    assert out["action"] in ACTIONS and d.summary["bottom_line"] == out
    assert d.verdicts["bottom_line"] == [out["text"]]
    assert "0.7M-parameter model on a toy task" in out["text"]          # always the caveat
    return out


def test_bottom_line_below_safe_is_nothing():
    out = _bottom(1e-3, FULL)
    assert out["action"] == "nothing" and out["text"].startswith("nothing: this run's k3 0.001")
    assert "k3_safe = 0.0013" in out["text"]


def test_bottom_line_between_is_watch_naming_what_to_do_at_harm():
    out = _bottom(5e-3, FULL)
    assert out["action"] == "watch" and "between k3_safe = 0.0013 and k3_harm = 0.013" in \
        out["text"]
    assert "apply TIS (unharmed at k3 = 0.014)" in out["text"]


def test_bottom_line_above_harm_names_the_remedy_and_its_k3():
    out = _bottom(0.05, FULL)
    assert out["action"] == "remedy"
    assert "apply TIS (unharmed at k3 = 0.014)" in out["text"] and "MIS" not in out["text"]


def test_bottom_line_above_harm_without_a_working_remedy_reduces_the_mismatch():
    hurt = _register({**THRESHOLD, f"TIS | {R}": (HURT, 1.1e-2, 0.9),
                      f"MIS | {R}": (HURT, 2e-2, 0.9)})
    out = _bottom(0.05, hurt)
    assert out["action"] == "reduce_mismatch"
    assert "no remedy measured on the register kept GRPO unharmed (TIS at k3 = 0.014, MIS at " \
           "k3 = 0.025: all harmed)" in out["text"] and SOURCE_FIX in out["text"]


def test_bottom_line_without_a_threshold_gives_no_verdict():
    pending = _register({"GRPO | logit sigma=1": ((0.63,), 1e-3, 0.9)})
    assert _bottom(1e-3, pending)["action"] == "no_verdict"
    assert _bottom(math.nan, FULL)["action"] == "no_verdict"


def test_bottom_line_with_a_temperature_fault_fixes_that_first():
    f = Fault("temperature", "warning", "m", dict(slope=1.3, t_rollout=0.77, t_train=1.3))
    out = _bottom(1e-3, FULL, [f])
    assert out["action"] == "fix_temperature" and "scales as 1.3 x logp_train" in out["text"]


def test_bottom_line_ends_the_report_console_and_summary(tmp_path, capsys):
    f = write_jsonl(tmp_path / "d.jsonl", GOOD)
    assert main(["diagnose", str(f), "--out", str(tmp_path / "o")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("[bottom_line] ") and lines[-1].startswith("wrote ")
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["bottom_line"]["text"] in lines[-2]
    html = (tmp_path / "o" / "report.html").read_text()
    assert html.rindex("<h2>") == html.index("<h2>Bottom line: what to do</h2>")
