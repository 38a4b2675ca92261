"""prime-rl's token exports (``tailtheory.diagnose.formats.prime_rl``): a fixture written in
prime-rl's layout, read back as the values written; its refusals."""

import json

from tailtheory.diagnose.read import detect, expand_dumps
from tests.diagnose.formats.framework_dumps import (_expected, _fails, _read, _responses, _same,
                                                   prime_rl_dump)


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
