"""When did the mismatch start to grow, and is it length or peakiness
(``tailtheory.diagnose.sections.drift``; NeMo-RL issue 1801, Precision-RL issue 10; the onset
test itself is ``test_onset.py``): the split exact and
attributing planted length growth, sharpening and scale growth; too short, a file without
steps; the same answer from every framework's writer and at any ``--batch-rows``; V6's harm
edge; the CLI's report, summary and bottom line on a planted dump and its clean twin; the docs'
worked example on its committed fixture."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from tailtheory.cli import main
from tailtheory.core.io import REPO_ROOT
from tailtheory.diagnose.aggregate import Accumulator
from tailtheory.diagnose.cli import DEFAULT_RHOS, HEAD_P, TAIL_P
from tailtheory.diagnose.read import BATCH_ROWS, expand_dumps, iter_batches, open_dumps
from tailtheory.diagnose.sections import SECTIONS
from tailtheory.diagnose.sections.base import Context, Diagnosis, complete
from tailtheory.diagnose.sections.drift import (MIN_STEPS, SECTION, STATUS, drift_brief,
                                                harm_edge, harm_line, split, window)
from tailtheory.diagnose.sections.steps import SECTION as STEPS

from ..conftest import write_jsonl
from ..formats.framework_dumps import nemo_rl_dump, prime_rl_dump, slime_dump
from ..planted import COMMITTED, DATA, drift_responses, engine_dump, generic_dump, same_records
from .conftest import drawn
from .test_register import FULL


def _drift(paths, batch_rows=BATCH_ROWS, register=()):
    """The steps and drift sections alone (the register and the rest skipped, for speed):
    ``(summary's drift, Diagnosis)``."""
    files = expand_dumps(paths)
    opened = open_dumps(files)
    acc = Accumulator(files, TAIL_P, HEAD_P, DEFAULT_RHOS, 0.05, kinds=[x.kind for x in opened],
                      sections=SECTIONS, dumps=opened)
    for i, dump in enumerate(opened):
        for b in iter_batches(dump, i, batch_rows):
            acc.add(b)
    d = Diagnosis(summary={"k3": acc.sum_k3 / acc.groups["all"]["n"]})
    ctx = Context(acc, complete(acc), 0.05, 0.01, None if register is None else list(register))
    STEPS.table(ctx, d)
    SECTION.table(ctx, d)
    return d.summary["drift"], d


def test_split_is_exact():
    """On random pooled windows the terms sum to the change, per response and per token, to
    float precision; the pooled window is the sums' ratio (token-weighted k3, q2)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        w = [{"length": v[0], "k3": v[1], "q2": v[2], "eps2": v[1] / (2 * v[2]),
              "S": v[0] * v[1], "steps": [0, 0]}
             for v in np.exp(rng.uniform(-12, 5, (2, 3)))]
        s = split(*w)
        r, t = s["response"], s["token"]
        assert r["length"] + r["peakiness"] + r["scale"] == pytest.approx(r["total"], abs=1e-12)
        assert t["peakiness"] + t["scale"] == pytest.approx(t["total"], abs=1e-12)
        assert r["total"] - r["length"] == pytest.approx(t["total"], abs=1e-12)
    t = pd.DataFrame({"step": [3, 4], "tokens": [10, 30], "responses": [2, 3],
                      "k3": [1e-3, 3e-3], "q2": [0.1, 0.3]})
    w = window(t, slice(0, 2))
    assert w["steps"] == [3, 4] and w["length"] == 8.0
    assert w["k3"] == pytest.approx(2.5e-3) and w["q2"] == pytest.approx(0.25)
    assert w["S"] == pytest.approx(8 * 2.5e-3) and w["eps2"] == pytest.approx(2.5e-3 / 0.5)
    zero = {**w, "q2": 0.0}
    assert split(zero, w) is None


@pytest.mark.parametrize("grow, dominant, sign", [((3.0, 1.0, 1.0), "length", 1),
                                                  ((1.0, 0.25, 1.0), "peakiness", -1),
                                                  ((1.0, 1.0, 8.0), "scale", 1)])
def test_split_attributes_planted_growth(tmp_path, grow, dominant, sign):
    """A generic dump (the TRL / verl hooks' writer) whose responses grow 3x longer, sharpen
    (E[(1-p)^2] x 0.25) or whose eps^2 grows 8x from step 20 of 40: the split names that term,
    with its sign, and the others stay near 0; the terms sum to the change; only the growing
    scale raises the token-mean k3 into an onset (the test is one-sided)."""
    path = generic_dump(tmp_path / "d.jsonl", drift_responses(grow=grow, seed=3))
    r, d = _drift([path])
    s = r["split"]
    assert s["dominant"] == dominant
    planted = math.log(grow[("length", "peakiness", "scale").index(dominant)])
    assert sign * s["response"][dominant] > 0.6 * abs(planted)   # the last fifth: 65-100% of it
    assert all(abs(s["response"][k]) < 0.3 for k in ("length", "peakiness", "scale")
               if k != dominant)
    rr = s["response"]
    assert rr["length"] + rr["peakiness"] + rr["scale"] == pytest.approx(rr["total"], abs=1e-12)
    # the token-mean k3 rises only with the scale (flat with length, falling as they sharpen)
    assert r["status"] == ("onset" if dominant == "scale" else "no_onset")
    assert "mostly " + dominant in d.verdicts["drift"][1]


def test_every_format_and_any_batch_size(tmp_path):
    """The same planted responses written by this engine's, NeMo-RL's, prime-rl's and slime's
    writers and the generic one give the same onset and split; ``--batch-rows 7`` gives the same as one batch;
    a generic file without ``step`` is named and not tested."""
    resps = drift_responses(per_step=1, length=16, grow=(1.0, 1.0, 20.0), edge=True, seed=5,
                            decimals=None)
    gen = generic_dump(tmp_path / "g.jsonl", resps)
    want, _ = _drift([gen])
    assert want["status"] == "onset" and abs(want["onset_step"] - 20) <= 5
    for path in (engine_dump(tmp_path / "engine", resps, weight="ones"),
                 nemo_rl_dump(tmp_path / "nemo", resps),
                 prime_rl_dump(tmp_path / "prime", resps, ranks=1),
                 slime_dump(tmp_path / "slime", resps)):
        got, _ = _drift([path])
        assert (got["status"], got["onset_step"], got["steps"]) == \
            (want["status"], want["onset_step"], want["steps"]), path
        for part in ("response", "token"):
            for k, v in want["split"][part].items():
                assert got["split"][part][k] == pytest.approx(v, abs=1e-5), (path, part, k)
    small, _ = _drift([gen], batch_rows=7)
    assert json.dumps(small, sort_keys=True) == json.dumps(want, sort_keys=True)
    rows = [dict(sample_id=r["i"] + 10 * r["step"], position=t, token_id=tok,
                 logp_train=float(r["lp_train"][t]), logp_rollout=float(r["lp_roll"][t]))
            for r in resps for t, tok in enumerate(r["resp"])]
    nostep = write_jsonl(tmp_path / "nostep.jsonl", rows)
    r, d = _drift([nostep])
    assert r["status"] == "lacks_step" and r["onset_step"] is None and r["split"] is None
    assert d.verdicts["drift"][0].startswith("no column step in 1 file (") and \
        str(nostep) in d.verdicts["drift"][0]


def test_too_short_and_the_summary_keys(run, tmp_path):
    """The shared 3-step diagnosis: too short, every key written, the split still given; 19
    steps too short, 20 tested."""
    acc, d, _ = run
    r = d.summary["drift"]
    assert r["status"] == "too_short" and r["steps"] == 3 and r["split"] is not None
    assert set(STATUS) == {"onset", "no_onset", "too_short", "lacks_step"}
    assert d.verdicts["drift"][0] == "too short: 3 steps; the onset test needs 20."
    for k in ("status", "reason", "steps", "min_steps", "reference", "mu", "sd", "phi_fit",
              "phi", "k", "alpha", "n_sim", "threshold", "cusum_max", "crossing_step",
              "onset_step", "k3_floor", "split", "harm"):
        assert k in r, k
    assert list(drawn(SECTION, d).columns) == ["step", "tokens", "responses", "length", "k3",
                                               "q2", "eps2", "log_k3", "cusum", "window"]
    for n in (MIN_STEPS - 1, MIN_STEPS):
        path = generic_dump(tmp_path / f"{n}.jsonl", drift_responses(steps=range(n), per_step=2))
        r = _drift([path])[0]
        assert (r["status"] == "too_short") == (n < MIN_STEPS)
        assert (r["threshold"] is None) == (n < MIN_STEPS)


def test_per_step_sums_against_the_records(tmp_path):
    """Per step: responses, mean length, E[(1-p)^2] with p the rollout's, eps2 and the split's
    windows, against a plain computation from the records."""
    resps = drift_responses(steps=range(5), per_step=3, length=4, seed=2, decimals=None)
    _, d = _drift([generic_dump(tmp_path / "d.jsonl", resps)], batch_rows=5)
    t = d.tables["drift"]
    for row in t.itertuples():
        rs = [r for r in resps if r["step"] == row.step]
        q2 = np.concatenate([(1 - np.exp(r["lp_roll"])) ** 2 for r in rs])
        lr = np.concatenate([r["lp_train"] - r["lp_roll"] for r in rs])
        assert row.responses == 3 and row.length == len(q2) / 3
        assert row.q2 == pytest.approx(q2.mean(), rel=1e-12)
        assert row.k3 == pytest.approx((np.expm1(lr) - lr).mean(), rel=1e-9)
        assert row.eps2 == pytest.approx(row.k3 / (2 * row.q2), rel=1e-12)
    assert list(t.window) == ["early", "", "", "", "late"]


def test_harm_edge():
    """The first step whose k3 reaches GRPO's k3_harm on a hand-made register (1.25e-2); none
    when no step does (also when every step's k3 is 0); not measured on an empty register, with
    the reason; always labelled as a toy-scale extrapolation."""
    t = pd.DataFrame({"step": [5, 6, 7, 8], "k3": [1e-3, 2e-2, 1e-2, 3e-2]})
    h = harm_edge(t, 1e-2, FULL)
    assert h["k3_harm"] == pytest.approx(1.25e-2) and h["step"] == 6
    assert harm_edge(t.iloc[[0, 2]], 1e-2, FULL)["step"] is None
    none = harm_edge(t, 1e-2, [])
    assert none["k3_harm"] is None and none["reason"] == "no GRPO logit-noise point is stored yet"
    assert (none["max_step"], none["max_step_k3"]) == (8, 3e-2)
    assert all(harm_line(x).startswith("V6's harm edge, a toy-scale extrapolation (")
               for x in (h, none))
    assert harm_line(none).endswith("not measured (no GRPO logit-noise point is stored yet).")
    assert harm_line(h).endswith("k3_harm = 0.013; the per-step k3 first reaches it at step 6.")
    equal = harm_edge(pd.DataFrame({"step": [0, 1], "k3": [0.0, 0.0]}), 0.0, FULL)
    assert harm_line(equal).endswith("no step reaches it (largest step k3 0 at step 0).")


def test_cli_report_on_a_planted_dump_and_its_clean_twin(capsys, tmp_path):
    """Through ``tailtheory diagnose --out``: the planted dump (eps^2 growing 20x from step 20)
    gets an onset, its figure, summary key and a bottom line naming it; the clean twin (the
    same seed, nothing grows) gets no onset and no clause."""
    planted = generic_dump(tmp_path / "p.jsonl", drift_responses(grow=(1.0, 1.0, 20.0), seed=9))
    out = tmp_path / "diag"
    assert main(["diagnose", str(planted), "--out", str(out), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    r = json.loads((out / "summary.json").read_text())["drift"]
    assert r["status"] == "onset" and abs(r["onset_step"] - 20) <= 5
    assert r["split"]["dominant"] == "scale" and (out / "drift.png").is_file()
    assert f"[drift] ONSET at step {r['onset_step']}: the token-mean k3 began" in "\n".join(lines)
    bottom = json.loads((out / "summary.json").read_text())["bottom_line"]["text"]
    assert f"the token-mean k3 began to rise at step {r['onset_step']} (CUSUM, 5% false " \
           f"alarms)" in bottom and "mostly scale" in bottom
    clean = generic_dump(tmp_path / "c.jsonl", drift_responses(seed=9))
    c, d = _drift([clean])
    assert c["status"] == "no_onset" and c["onset_step"] is None
    assert abs(c["split"]["response"]["total"]) < math.log(2)
    assert d.verdicts["drift"][1].endswith(": no term beyond 2x, nothing to attribute.")
    assert drift_brief(c) is None and drift_brief(None) is None


def _doc_block(marker: str) -> list[str]:
    """The lines of the fenced block that follows ``marker`` in docs/diagnose.md."""
    doc = (REPO_ROOT / "docs" / "diagnose.md").read_text()
    return doc[doc.index(marker):].split("```")[1].split("\n", 1)[1].strip().splitlines()


def test_docs_example_on_the_committed_fixture(tmp_path):
    """docs/diagnose.md shows the ``[drift]`` lines of ``tailtheory diagnose`` on
    ``tests/diagnose/data/drift_onset.jsonl``, which holds what
    :func:`~tests.diagnose.planted.drift_onset` writes; the harm edge's line, which reads the
    stored register, matches up to its numbers."""
    path = DATA / "drift_onset.jsonl"
    assert same_records(path, COMMITTED["drift_onset.jsonl"](tmp_path / "f.jsonl"))
    assert path.stat().st_size < 20000
    _, d = _drift([path], register=None)
    out = [f"[drift] {x}" for x in d.verdicts["drift"]]
    cmd = "tailtheory diagnose tests/diagnose/data/drift_onset.jsonl --out diag/"
    block = _doc_block(f"<!-- output: the [drift] lines of {cmd} -->")
    assert block[:-1] == [f"$ {cmd}", *out[:-1]]
    numbers = r"[-+0-9.e]+"
    shape = lambda s: re.sub(numbers, "#", s)  # noqa: E731
    assert shape(block[-1]) == shape(out[-1])
