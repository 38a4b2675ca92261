"""NeMo-RL's training-data logs (``tailtheory.diagnose.formats.nemo_rl``): a fixture written in
NeMo-RL's layout, read back as the values written; its refusals."""

import json

import numpy as np
import pytest

from tailtheory.diagnose.read import detect, expand_dumps
from tests.diagnose.formats.framework_dumps import (_expected, _fails, _read, _responses, _same,
                                                   nemo_rl_dump)


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
