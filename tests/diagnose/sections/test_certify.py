"""The certification (``tailtheory.diagnose.sections.certify``, ``tailtheory diagnose DUMP
--certify``): its rules on per-step numbers; planted faults against their clean twins in
prime-rl's layout (exit 1, 0, 2); every format read with its stored precision; the bitwise bar;
streaming; bad input; the docs' worked example on its committed fixture."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tailtheory.cli import main
from tailtheory.core.estimators import k3
from tailtheory.core.io import REPO_ROOT
from tailtheory.diagnose.cli import diagnose_dumps
from tailtheory.diagnose.sections.certify import (DEFAULT_BAR, MIN_STEPS, certify_verdict,
                                                  check_bar)

from ..conftest import summaries_close
from ..formats.framework_dumps import nemo_rl_dump, prime_rl_dump, slime_dump
from ..planted import (COMMITTED, DATA, engine_dump, generic_dump, planted_responses,
                       same_records)


def _certify(capsys, *args) -> tuple[int, list[str]]:
    rc = main(["diagnose", *map(str, args), "--certify", "--quiet"])
    return rc, capsys.readouterr().out.strip().splitlines()


def test_rules_on_per_step_numbers():
    steps, low = np.arange(MIN_STEPS), np.full(MIN_STEPS, 0.01)
    some = np.ones(MIN_STEPS, np.int64)
    ok = certify_verdict(steps, low, some, DEFAULT_BAR)
    assert (ok["verdict"], ok["status"], ok["failing_steps"]) == ("pass", 0, [])
    at = certify_verdict(steps, np.full(MIN_STEPS, DEFAULT_BAR), some, DEFAULT_BAR)
    assert at["verdict"] == "pass"                                    # <= the bar passes
    hi = low.copy()
    hi[7] = 0.02
    bad = certify_verdict(steps, hi, some, DEFAULT_BAR)
    assert (bad["verdict"], bad["status"], bad["max_step"]) == ("fail", 1, 7)
    assert bad["failing_steps"] == [{"step": 7, "k3": 0.02, "unequal_tokens": 1}]
    few = certify_verdict(steps[:MIN_STEPS - 1], low[:-1], some[:-1], DEFAULT_BAR)
    assert (few["verdict"], few["status"]) == ("undecided", 2)
    assert few["reason"] == f"{MIN_STEPS - 1} steps read; a pass needs at least {MIN_STEPS}"
    assert certify_verdict(steps[:9], hi[:9], some[:9], DEFAULT_BAR)["verdict"] == "fail"
    lacks = certify_verdict(steps, low, some, DEFAULT_BAR, lacks_step=["a.jsonl"])
    assert lacks["verdict"] == "undecided" and "no column step in 1 file (a.jsonl)" in \
        lacks["reason"]
    nan = certify_verdict(steps, np.where(steps == 3, np.nan, low), some, DEFAULT_BAR)
    assert nan["verdict"] == "fail"
    zero = np.zeros(MIN_STEPS)                   # bar 0 reads the unequal tokens, never k3
    assert certify_verdict(steps, zero, some, 0)["verdict"] == "fail"
    assert certify_verdict(steps, zero, 0 * some, 0)["verdict"] == "pass"
    for x in (-1, float("nan"), float("inf"), "x"):
        with pytest.raises(ValueError, match="--bar must be"):
            check_bar(x)


def _prime(tmp_path, name, steps, loud=(), seed=1, ratio=None):
    resps = planted_responses(steps=steps, loud=loud, seed=seed, decimals=None)
    return prime_rl_dump(tmp_path / name, resps, ranks=1, ratio=ratio), resps


def test_prime_rl_planted_and_clean_twins(capsys, tmp_path):
    """Steps 5 and 12 planted above the bar fail (exit 1, named with their k3 and the worst
    tokens); the clean twin passes (exit 0); five clean steps cannot decide (exit 2)."""
    clean, _ = _prime(tmp_path, "clean", range(21))
    loud, resps = _prime(tmp_path, "loud", range(21), loud=(5, 12))
    short, _ = _prime(tmp_path, "short", range(5))
    rc, out = _certify(capsys, clean)
    assert rc == 0 and out[0].startswith("[certify] PASS (exit 0): every step's token-mean k3 "
                                         "of log rho = logp_train - logp_rollout (prime-rl's "
                                         "sign) is <= 0.015 over 21 steps")
    assert "PR 2672" in out[-1] and "learning rate" in out[-1]
    rc, out = _certify(capsys, short)
    assert rc == 2 and out[0].startswith("[certify] CANNOT DECIDE (exit 2): 5 steps read; a "
                                         "pass needs at least 20 (no step above 0.015 so far")
    rc, out = _certify(capsys, loud)
    assert rc == 1 and "is above 0.015 in 2 of 21 steps: step 5 (" in out[0]
    assert "step 12 (" in out[0] and out[1].startswith("[certify] largest |log rho|: step ")
    rc = main(["diagnose", str(loud), "--certify", "--quiet", "--json"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 1 and len(lines) == 1
    c = json.loads(lines[0])
    assert [f["step"] for f in c["failing_steps"]] == [5, 12] and c["out"] is None
    for f in c["failing_steps"]:                    # prime-rl's own tokens: its rl-weighted ones
        lr = np.concatenate([r["lp_train"] - r["lp_roll"] if r["i"] != 1 else
                             (r["lp_train"] - r["lp_roll"])[:-1]
                             for r in resps if r["step"] == f["step"]])
        assert f["k3"] == pytest.approx(k3(torch.from_numpy(lr)).mean().item(), rel=1e-9)
    w = c["worst_tokens"][0]
    assert w["step"] in (5, 12) and w["abs_log_rho"] == max(abs(x["log_rho"])
                                                           for x in c["worst_tokens"])
    assert c["precision"] == "JSON-rounded decimals"


def test_every_format_with_its_precision(capsys, tmp_path):
    """NeMo-RL, slime, the engine and generic parquet dumps of 20 clean steps pass, each naming
    how it stores its log-probs; a file without steps cannot decide, naming the column."""
    resps = planted_responses(steps=range(1, 21), seed=2, decimals=None)
    paths = {"JSON-rounded decimals": nemo_rl_dump(tmp_path / "nemo", resps),
             "float32 as stored": slime_dump(tmp_path / "slime", resps),
             "float64 as stored": engine_dump(tmp_path / "engine", resps, "ones")}
    rows = [dict(sample_id=r["i"], step=r["step"], position=t, token_id=r["resp"][t],
                 logp_train=r["lp_train"][t], logp_rollout=r["lp_roll"][t])
            for r in resps for t in range(len(r["resp"]))]
    tbl = pa.Table.from_pylist(rows)
    tbl = tbl.set_column(5, "logp_rollout", tbl["logp_rollout"].cast(pa.float32()))
    pq.write_table(tbl, tmp_path / "mixed.parquet")
    paths["logp_train float64, logp_rollout float32 as stored"] = tmp_path / "mixed.parquet"
    for precision, path in paths.items():
        c = diagnose_dumps([path], register=[]).summary["certify"]
        assert (c["verdict"], c["steps"], c["precision"]) == ("pass", 20, precision), path
        assert c["unequal_tokens"] > 0                                # so --bar 0 fails
    rc, out = _certify(capsys, paths["float32 as stored"], "--bar", "0")
    assert rc == 1 and "logp_train differs from logp_rollout (float32 as stored) on " in out[0]
    nostep = tmp_path / "nostep.parquet"                     # sample ids unique over steps
    ids = pa.array([100 * r["step"] + r["sample_id"] for r in rows])
    pq.write_table(tbl.set_column(0, "sample_id", ids).drop_columns(["step"]), nostep)
    rc, out = _certify(capsys, nostep)
    assert rc == 2 and f"no column step in 1 file ({nostep})" in out[0]
    renamed = tmp_path / "renamed" / "log.jsonl"
    renamed.parent.mkdir()
    renamed.write_text((tmp_path / "nemo" / "train_data_step3.jsonl").read_text())
    rc, out = _certify(capsys, renamed, "--format", "nemo-rl")
    assert rc == 2 and f"no column step in 1 file ({renamed})" in out[0]


def test_bar_zero_is_bitwise_at_the_stored_precision(capsys, tmp_path):
    """Equal log-probs pass ``--bar 0`` (float32 as stored); a difference of 1e-13 on one token,
    whose k3 rounds to about 0, fails it while passing any bar above 0."""
    resps = planted_responses(sd=0.0, seed=3, decimals=None)
    rows = [dict(sample_id=r["i"], step=r["step"], position=t, token_id=r["resp"][t],
                 logp_train=r["lp_train"][t], logp_rollout=r["lp_roll"][t])
            for r in resps for t in range(len(r["resp"]))]
    schema = pa.schema([("sample_id", pa.int64()), ("step", pa.int64()),
                        ("position", pa.int64()), ("token_id", pa.int64()),
                        ("logp_train", pa.float32()), ("logp_rollout", pa.float32())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "eq.parquet")
    rc, out = _certify(capsys, tmp_path / "eq.parquet", "--bar", "0")
    assert rc == 0 and out[0] == ("[certify] PASS (exit 0): logp_train equals logp_rollout "
                                  "bitwise on every token of 20 steps (float32 as stored).")
    nearly = generic_dump(tmp_path / "nearly.jsonl", resps)
    recs = [json.loads(x) for x in nearly.read_text().splitlines()]
    recs[3]["logp_rollout"][1] += 1e-13
    nearly.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rc, out = _certify(capsys, nearly, "--bar", "0")
    assert rc == 1 and out[0] == (f"[certify] FAIL (exit 1): logp_train differs from "
                                  f"logp_rollout (JSON-rounded decimals) on 1 token in 1 of 20 "
                                  f"steps: step {recs[3]['step']} (1 token differ).")
    assert _certify(capsys, nearly, "--bar", "1e-20")[0] == 0


def test_streaming_and_the_report(capsys, tmp_path):
    """Three rows at a time give the certification of reading at once; with ``--out`` the
    report is written too, with the certification's figure, CSV, summary key and bottom line."""
    loud, _ = _prime(tmp_path, "loud", range(21), loud=(5, 12))
    a = diagnose_dumps([loud], batch_rows=3, register=[]).summary["certify"]
    b = diagnose_dumps([loud], batch_rows=10 ** 6, register=[]).summary["certify"]
    summaries_close(a, b)
    out = tmp_path / "o"
    assert main(["diagnose", str(loud), "--certify", "--quiet", "--out", str(out)]) == 1
    assert capsys.readouterr().out.strip().endswith(f"wrote {out / 'report.html'} and "
                                                    f"{out / 'summary.json'}")
    s = json.loads((out / "summary.json").read_text())
    assert s["certify"]["verdict"] == "fail" and (out / "certify.png").is_file()
    assert "certification (mean k3 <= 0.015 at every step, at least 20 steps): fails at 2 of " \
           "21 steps (first: step 5)" in s["bottom_line"]["text"]
    csv = (out / "certify.csv").read_text().splitlines()
    assert csv[0] == "step,tokens,k3,unequal_tokens,passes" and len(csv) == 22


def test_bad_input(capsys, tmp_path):
    """Bad options: one line, exit 2; dumps it cannot read: cannot decide, the reason named
    (one JSON line with ``--json``)."""
    clean, _ = _prime(tmp_path, "clean", range(3))
    for args, match in ((["--certify", "--bar", "-1"], "--bar must be a finite number >= 0"),
                        (["--json", "--out", str(tmp_path / "o")], "--json goes with --certify"),
                        ([], "--out DIR is required (only --certify and --resume-at run "
                             "without it)")):
        assert main(["diagnose", str(clean), "--quiet", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"tailtheory: error: {match}" or (match in err and len(err.splitlines())
                                                        == 1), err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"sample_id": 0, "position": 0, "token_id": 1,
                               "logp_train": -1.0}) + "\n")
    rc, out = _certify(capsys, bad)
    assert rc == 2 and out[0].startswith("[certify] CANNOT DECIDE (exit 2): ")
    assert "missing column(s) logp_rollout" in out[0]
    assert main(["diagnose", str(bad), "--certify", "--json", "--quiet"]) == 2
    c = json.loads(capsys.readouterr().out)
    assert c["verdict"] == "undecided" and "missing column(s) logp_rollout" in c["reason"]


def _doc_block(marker: str) -> list[str]:
    """The lines of the fenced block that follows ``marker`` in docs/diagnose.md."""
    doc = (REPO_ROOT / "docs" / "diagnose.md").read_text()
    rest = doc[doc.index(marker):].split("```")[1]
    return rest.split("\n", 1)[1].strip().splitlines()


def test_docs_example_on_the_committed_fixture(capsys, tmp_path):
    """docs/diagnose.md shows what ``--certify`` prints on ``tests/diagnose/data/
    certify_fail.jsonl``, and the fixture holds what :func:`~tests.diagnose.planted.certify_fail`
    writes."""
    path = DATA / "certify_fail.jsonl"
    assert same_records(path, COMMITTED["certify_fail.jsonl"](tmp_path / "f.jsonl"))
    rc, out = _certify(capsys, path)
    assert rc == 1 and path.stat().st_size < 8000
    assert _doc_block("<!-- output: tailtheory diagnose tests/diagnose/data/certify_fail.jsonl "
                      "--certify -->") == ["$ tailtheory diagnose tests/diagnose/data/"
                                           "certify_fail.jsonl --certify", *out, "$ echo $?",
                                           "1"]
