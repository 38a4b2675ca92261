"""Framework dumps (``tailtheory.diagnose.frameworks``): NeMo-RL, prime-rl and slime / Miles
fixtures written here in each framework's layout, read back as the values written."""

import json

import numpy as np
import pytest

from tailtheory.cli import main
from tailtheory.diagnose.read import detect, expand_dumps
from tests.diagnose.framework_dumps import (_expected, _fails, _read, _report, _responses, _same,
                                           nemo_rl_dump, prime_rl_dump, slime_dump)


@pytest.mark.parametrize("wrap", [True, False])
def test_nemo_rl_values(tmp_path, wrap):
    resps = _responses(0)
    d = nemo_rl_dump(tmp_path / "logs" / "exp_001", resps, wrap=wrap)
    files = expand_dumps([d])
    assert [f.name for f in files] == [f"train_data_step{s}.jsonl" for s in (1, 2, 3)]
    assert {detect(f) for f in files} == {"nemo-rl"}
    got = _read([d])
    assert got.ok.all()
    _same(got, _expected(resps), ["token_id", "logp_train", "logp_rollout", "advantage",
                                  "reward", "step"])


def test_nemo_rl_detected_by_keys_and_refusals(capsys, tmp_path):
    resps = _responses(1, steps=(4,))
    d = nemo_rl_dump(tmp_path / "n", resps)
    renamed = d / "mine.jsonl"
    (d / "train_data_step4.jsonl").rename(renamed)
    assert detect(renamed) == "nemo-rl"
    _same(_read([renamed]).assign(step=4), _expected(resps), ["logp_train", "logp_rollout"])
    old = nemo_rl_dump(tmp_path / "old", resps, drop=("token_ids", "token_loss_mask"))
    _fails(capsys, tmp_path, old, match="lacks token_ids, token_loss_mask (written by NeMo-RL "
                                        "before 0.6.0")
    bad = tmp_path / "bad"
    nemo_rl_dump(bad, resps)
    rec = json.loads((bad / "train_data_step4.jsonl").read_text().splitlines()[2])
    rec["prev_logprobs"][0] = rec["prev_logprobs"][0][:-1]
    text = (bad / "train_data_step4.jsonl").read_text().splitlines()
    text[2] = json.dumps(rec)
    (bad / "train_data_step4.jsonl").write_text("\n".join(text) + "\n")
    err = _fails(capsys, tmp_path, bad, match="line 3: per-token lists of different lengths")
    assert str(bad / "train_data_step4.jsonl") in err
    skipped = tmp_path / "skipped"
    nemo_rl_dump(skipped, [dict(r, lp_train=np.zeros_like(r["lp_train"])) for r in resps])
    _fails(capsys, tmp_path, skipped, match="force_on_policy_ratio")


def test_prime_rl_values(tmp_path):
    resps = _responses(2, steps=(0, 1, 2))
    run = prime_rl_dump(tmp_path / "run", resps)
    files = expand_dumps([run])
    assert len(files) == 6 and {detect(f) for f in files} == {"prime-rl"}
    got = _read([run])
    want = _expected(resps, skip=lambda r, t: r["i"] == 1 and t == len(r["resp"]) - 1)
    _same(got, want, ["token_id", "logp_train", "logp_rollout", "advantage", "step"])
    assert got.reward.isna().all()          # prime-rl exports no reward


def test_prime_rl_refusals(capsys, tmp_path):
    resps = _responses(3, steps=(0,))
    run = prime_rl_dump(tmp_path / "flipped", resps, flip=True)
    _fails(capsys, tmp_path, run, match="mismatch_kl disagrees")
    good = prime_rl_dump(tmp_path / "good", resps)
    _fails(capsys, tmp_path, good, "--format", "nemo-rl",
           match="--format nemo-rl, but this file is a prime-rl dump")
    f = good / "token_exports" / "step_0" / "rank_0.jsonl"
    rec = json.loads(f.read_text().splitlines()[0])
    rec["trainer_logprobs"] = "oops"
    f.write_text(json.dumps(rec) + "\n")
    _fails(capsys, tmp_path, f, match="line 1: trainer_logprobs must hold numbers")


def test_prime_rl_null_logprob_is_excluded(tmp_path):
    resps = _responses(4, steps=(0,))
    run = prime_rl_dump(tmp_path / "run", resps, ranks=1)
    f = run / "token_exports" / "step_0" / "rank_0.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines()]
    recs[0]["inference_logprobs"][-1] = None
    recs[0]["mismatch_kl"][-1] = None
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    got = _read([run])
    assert (~got.ok).sum() == 1


@pytest.mark.parametrize("fmt", ["nemo-rl", "prime-rl", "slime"])
def test_end_to_end(tmp_path, fmt):
    resps = _responses(8, steps=(1, 2, 3), n=16)
    write = {"nemo-rl": nemo_rl_dump, "prime-rl": prime_rl_dump, "slime": slime_dump}[fmt]
    run = write(tmp_path / "run", resps)
    s = _report(tmp_path, run)
    assert s["steps"] == 3 and s["tokens"] > 0
    out = tmp_path / "diag2"
    assert main(["diagnose", str(run), "--format", fmt, "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["tokens"] == s["tokens"]


def test_unknown_format_named(capsys, tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"a": 1, "b": [1, 2]}) + "\n")
    err = _fails(capsys, tmp_path, f, match="missing column(s)")
    assert "generic, engine, nemo-rl, prime-rl, slime" in err
