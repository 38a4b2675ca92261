"""slime / Miles' ``--dump-details`` files (``tailtheory.diagnose.formats.slime``): values read
back as written, tensor-parallel copies read once, pickled objects refused and never run,
one-line errors."""

import argparse

import torch

from tailtheory.diagnose.formats.slime import load_pt
from tailtheory.diagnose.read import detect, expand_dumps
from tests.diagnose.formats.framework_dumps import (_RunsCode, _expected, _fails, _read,
                                                   _responses, _same, miles_dump, slime_dump)


def test_slime_values(tmp_path):
    resps = _responses(5)
    run = slime_dump(tmp_path / "dump", resps)
    files = expand_dumps([run])
    assert [f.name for f in files] == ["1.pt", "2.pt", "3.pt"]
    assert {detect(f) for f in files} == {"slime"}
    got = _read([run])
    want = _expected(resps, skip=lambda r, t: r["i"] == 2 and t == 2)
    _same(got, want, ["token_id", "logp_train", "logp_rollout", "advantage", "reward", "step"])


def test_miles_values_tensor_parallel_copies_read_once(tmp_path):
    resps = _responses(6, steps=(0, 1))
    run = miles_dump(tmp_path / "dump", resps)
    assert len(expand_dumps([run])) == 8
    got = _read([run])
    _same(got, _expected(resps), ["token_id", "logp_train", "logp_rollout", "advantage",
                                  "reward", "step"])


def test_slime_refusals(capsys, tmp_path):
    resps = _responses(7, steps=(0,))
    # a file that needs a pickled object: refused, and its code never runs
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt"
    torch.save(dict(samples=[], payload=_RunsCode(str(marker))), evil)
    err = _fails(capsys, tmp_path, evil, match="refused")
    assert not marker.exists() and str(evil) in err
    other = tmp_path / "ns.pt"
    torch.save(dict(rollout_id=0, samples=[], cfg=argparse.Namespace(lr=1e-6)), other)
    _fails(capsys, tmp_path, other, match="argparse.Namespace")
    weights = tmp_path / "model.pt"
    torch.save({"layer.weight": torch.zeros(2, 2)}, weights)
    _fails(capsys, tmp_path, weights, match="not a slime / Miles train dump")
    torn = tmp_path / "torn.pt"
    torn.write_bytes(b"PK\x03\x04 not really")
    _fails(capsys, tmp_path, torn, match="not a readable torch .pt file")
    no_lp = tmp_path / "nolp"
    slime_dump(no_lp, resps)
    f = no_lp / "train_data" / "0.pt"
    obj = load_pt(f)
    del obj["samples"][1]["log_probs"]
    torch.save(obj, f)
    _fails(capsys, tmp_path, f, match="sample 1: lacks log_probs")
    cp = miles_dump(tmp_path / "cp", resps, tp=1)
    g = cp / "train_data" / "0_0.pt"
    obj = load_pt(g)
    obj["cp_size"] = 2
    torch.save(obj, g)
    _fails(capsys, tmp_path, g, match="context parallelism")
