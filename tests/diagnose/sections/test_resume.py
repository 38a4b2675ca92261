"""The resume check (``tailtheory.diagnose.sections.resume``, ``tailtheory diagnose DUMP
--resume-at STEP``): its rule on per-step numbers (quiet on clean series with a fake resume
point, a planted jump flagged); clean dumps over several seeds stay quiet, a planted jump after a
resume (slime issue 1695) is flagged, in the generic and prime-rl layouts; a reward jump; exit 2
with one line; the bottom line; the docs' worked example on its committed fixture."""

import numpy as np
import pytest

from tailtheory.cli import main
from tailtheory.core.io import REPO_ROOT
from tailtheory.diagnose.cli import diagnose_dumps
from tailtheory.diagnose.sections.resume import (JUMP_SD, MAD_SD, SIDE, resume_check,
                                                 robust_sd)

from ..formats.framework_dumps import prime_rl_dump
from ..planted import COMMITTED, DATA, generic_dump, planted_responses, same_records


def _resume(capsys, *args) -> tuple[int, list[str], str]:
    rc = main(["diagnose", *map(str, args), "--quiet"])
    out = capsys.readouterr()
    return rc, out.out.strip().splitlines(), out.err.strip()


def test_robust_sd():
    x = np.array([0.0, 1.0, -1.0, 2.0, -2.0, 100.0])
    assert robust_sd(x) == pytest.approx(MAD_SD * np.median(np.abs(x - np.median(x))))
    assert robust_sd([1, 1, 1, 1, 3]) == pytest.approx(1.2533 * 0.4)
    assert robust_sd([2.0, 2.0]) == 0.0 and np.isnan(robust_sd([np.nan]))


def test_rule_on_clean_series_and_a_planted_jump():
    """Over 200 seeds of clean per-step series (k3 of chi-square noise, |log rho|, a noisy
    reward) with a fake resume point, the rule flags none; a jump of a few steps after the
    resume is flagged in the series that jumps, and only there."""
    steps, at = np.arange(40), 20
    flagged = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        k3 = 2e-4 * rng.chisquare(10, 40) / 10
        series = {"k3": k3, "abs_log_rho": 0.016 + 1e-3 * rng.normal(size=40),
                  "reward": rng.binomial(16, 0.4, 40) / 16}
        flagged += resume_check(steps, series, at)["jump"]
    assert flagged == 0
    k3 = 2e-4 * np.random.default_rng(0).chisquare(10, 40) / 10
    k3[at:at + 3] += 0.04                                   # three loud steps after the resume
    r = resume_check(steps, {"k3": k3, "reward": np.full(40, 0.5)}, at)
    assert r["jump"] and r["status"] == 1 and r["before"] == list(range(15, 20))
    assert [s["jump"] for s in r["series"]] == [True, False]
    assert r["series"][0]["z"] > JUMP_SD and r["series"][1]["z"] == 0
    lone = np.zeros(40)
    lone[at:] = 1.0                                         # a flat series that steps up
    assert resume_check(steps, {"reward": lone}, at)["series"][0]["z"] == np.inf


def test_cannot_check():
    steps = np.arange(12)
    x = {"k3": np.ones(12)}
    for at, msg in ((4, "4 steps before it and 8 steps from it on; the check needs 5"),
                    (8, "8 steps before it and 4 steps from it on"),
                    (12, "no step 12 in the dump (its steps run from 0 to 11, 12 steps)")):
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            resume_check(steps, x, at)
    with pytest.raises(ValueError, match="step-to-step changes away from the resume"):
        resume_check(np.arange(6), {"k3": np.ones(6)}, 3, side=3)   # 2 changes away: too few
    assert resume_check(np.arange(10), {"k3": np.ones(10)}, 5)["verdict"] == "quiet"


def test_clean_dumps_stay_quiet_and_a_planted_jump_is_flagged(tmp_path):
    """Generic dumps of 24 clean steps over four seeds stay quiet with a fake resume at step
    12; their twins with steps 12-14 planted at sd 0.3 (slime issue 1695) jump in k3 and in
    mean |log rho|; the per-step table marks the steps compared."""
    for seed in range(4):
        clean = generic_dump(tmp_path / f"c{seed}.jsonl",
                             planted_responses(steps=range(24), seed=seed))
        d = diagnose_dumps([clean], resume_at=12, register=[])
        assert d.summary["resume"]["verdict"] == "quiet", (seed, d.summary["resume"])
        loud = generic_dump(tmp_path / f"l{seed}.jsonl",
                            planted_responses(steps=range(24), seed=seed, loud=(12, 13, 14)))
        r = diagnose_dumps([loud], resume_at=12, register=[]).summary["resume"]
        assert r["verdict"] == "jump"
        assert {s["name"]: s["jump"] for s in r["series"]} == \
            {"k3": True, "abs_log_rho": True, "reward": False}
    t = d.tables["resume"]
    assert list(t.side[7:17]) == ["before"] * SIDE + ["after"] * SIDE
    assert diagnose_dumps([clean], register=[]).summary["resume"] is None


def test_reward_jump_and_prime_rl_without_reward(capsys, tmp_path):
    """A reward that falls after the resume, with the log-probs clean, jumps in the reward
    alone; prime-rl's exports carry no reward, which the check says; the report's bottom line
    names the jump."""
    resps = planted_responses(steps=range(20), per_step=8, seed=3)
    rng = np.random.default_rng(3)
    for r in resps:
        r["reward"] = float(rng.binomial(1, 0.95 if r["step"] < 10 else 0.05))
    path = generic_dump(tmp_path / "reward.jsonl", resps)
    rc, out, _ = _resume(capsys, path, "--resume-at", 10, "--out", tmp_path / "diag")
    assert rc == 1 and out[0].endswith("(steps 5-9 against 10-14): mean reward.")
    assert (tmp_path / "diag" / "resume.png").exists()
    d = diagnose_dumps([path], resume_at=10, register=[])
    assert "resume at step 10: a jump in the reward (" in d.summary["bottom_line"]["text"]
    prime = prime_rl_dump(tmp_path / "prime", planted_responses(steps=range(20), seed=2,
                                                                decimals=None), ranks=1)
    rc, out, _ = _resume(capsys, prime, "--resume-at", 10)
    assert rc == 0 and out[0].startswith("[resume] QUIET (exit 0): no jump across the resume "
                                         "at step 10 (steps 5-9 against 10-14).")
    assert "[resume] no reward in the dump: the reward is not checked." in out


def test_bad_input_exit_2_with_one_line(capsys):
    path = DATA / "resume_jump.jsonl"
    rc, out, err = _resume(capsys, path, "--resume-at", 12)
    assert rc == 2 and out == [] and err == ("tailtheory: error: --resume-at 12: 12 steps before "
                                             "it and 4 steps from it on; the check needs 5 on "
                                             "each side")
    rc, out, err = _resume(capsys, path, "--resume-at", 30)
    assert rc == 2 and len(err.splitlines()) == 1 and "no step 30 in the dump" in err
    rc, _, err = _resume(capsys, path, "--resume-at", 10, "--certify")
    assert rc == 2 and err == "tailtheory: error: --certify and --resume-at: one at a time"


def test_docs_example_on_the_committed_fixture(capsys, tmp_path):
    """docs/diagnose.md shows what ``--resume-at 10`` prints on ``tests/diagnose/data/
    resume_jump.jsonl``, and the fixture holds what :func:`~tests.diagnose.planted.resume_jump`
    writes."""
    path = DATA / "resume_jump.jsonl"
    assert same_records(path, COMMITTED["resume_jump.jsonl"](tmp_path / "f.jsonl"))
    rc, out, _ = _resume(capsys, path, "--resume-at", 10)
    assert rc == 1 and path.stat().st_size < 8000
    cmd = "tailtheory diagnose tests/diagnose/data/resume_jump.jsonl --resume-at 10"
    marker = f"<!-- output: {cmd} -->"
    doc = (REPO_ROOT / "docs" / "diagnose.md").read_text()
    block = doc[doc.index(marker):].split("```")[1].split("\n", 1)[1].strip().splitlines()
    assert block == [f"$ {cmd}", *out, "$ echo $?", "1"]
