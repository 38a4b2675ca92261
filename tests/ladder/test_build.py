"""The model-size ladder's commands and records (``tailtheory/ladder/build.py``): the rung
table, and ``ladder build`` recording each rung as it finishes. Builds here use the smallest
rungs' configs only, with the corpus LM and the warm start replaced by recorded folders (the
rungs themselves: ``tests/engine/start/test_rungs.py``)."""

from __future__ import annotations

import json

import pytest

from provenance_check import check_named
from tailtheory.cli import main
from tailtheory.core.io import CACHE_ENV, atomic_write_json
from tailtheory.core.provenance import cpu_model
from tailtheory.engine.start.corpus_lm import corpus_key
from tailtheory.engine.start.resume import PROGRESS, STATE, partial_folder
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.start.rungs import RUNGS
from tailtheory.ladder import build as ladder
from tailtheory.ladder.build import facts


def test_a_measurement_names_the_build_of_a_rung_not_built(monkeypatch, tmp_path):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))
    with pytest.raises(ValueError, match="build it first: tailtheory ladder build --rung w256"):
        ladder.require_built("w256")


def test_the_table_spans_what_a_size_trend_needs():
    f = [facts(r) for r in RUNGS]
    assert [x["non_embedding_params"] for x in f] == sorted(x["non_embedding_params"] for x in f)
    assert f[-1]["non_embedding_params"] / f[0]["non_embedding_params"] >= 30
    assert f[-1]["params"] >= 10_000_000 and len(f) >= 4
    assert f[0]["pretrain_tokens"] == ladder.BASE_TOKENS and f[0]["epochs"] > 1


def _fake_builds(monkeypatch, tmp_path):
    """``corpus_lm`` and ``warm_start`` return folders holding records, as the caches do."""
    def corpus(cfg, progress, threads):
        d = tmp_path / f"corpus_{cfg.model.hidden}"
        d.mkdir(exist_ok=True)
        (d / "corpus_lm.json").write_text(json.dumps(
            {"heldout_loss": 4.0, "heldout_ppl": 54.6, "seconds": 500.0,
             "weights": f"c{cfg.seed}" * 8, "cpu": "a CPU"}))
        return d

    def warm(cfg, progress, threads):
        d = tmp_path / f"warm_{cfg.model.hidden}_{cfg.seed}"
        d.mkdir(exist_ok=True)
        if not (d / "sft.json").exists():
            (d / "sft.json").write_text(json.dumps(
                {"accuracy": 0.4, "steps": 700, "window": [0.35, 0.7], "seconds": 1000.0,
                 "hash": config_hash(cfg), "weights": f"{cfg.seed}a" * 8, "cpu": "a CPU"}))
        return d

    monkeypatch.setattr(ladder, "corpus_lm", corpus)
    monkeypatch.setattr(ladder, "warm_start", warm)
    monkeypatch.setattr(ladder, "warm_weights", lambda cfg: None)
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))


def test_build_records_each_rung_and_keeps_the_others(monkeypatch, tmp_path, capsys):
    _fake_builds(monkeypatch, tmp_path)
    assert main(["ladder", "build", "--rung", "base", "--quiet"]) == 0
    assert main(["ladder", "build", "--rung", "w192", "--quiet"]) == 0
    record = json.loads((tmp_path / "results" / "ladder.json").read_text())
    assert [r["rung"] for r in record["config"]["rungs"]] == [r.name for r in RUNGS]
    assert list(record["data"]) == ["base", "w192"]                    # built, in ladder order
    rows = [*record["config"]["rungs"], *record["data"].values()]
    assert all({"params", "non_embedding_params"} <= set(r) for r in rows)
    assert record["data"]["base"]["heldout_ppl"] == 54.6
    assert record["data"]["w192"]["warm_accuracy"] == 0.4
    assert ladder.stored().keys() == {"base", "w192"}
    capsys.readouterr()
    assert main(["ladder", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + len(RUNGS) and out[1].split()[-3:] == ["1", "54.6", "0.400"]
    assert out[-2].split()[-3:] == ["0", "-", "-"] and out[-1].startswith("models:")


def test_a_rebuild_as_another_model_keeps_the_earlier_build(monkeypatch, tmp_path, capsys):
    """A warm start rebuilt on another CPU is another model: the rung's row is replaced, the
    earlier build kept under ``previous_builds`` and said on stderr; the same model again adds
    nothing."""
    _fake_builds(monkeypatch, tmp_path)
    assert main(["ladder", "build", "--rung", "base", "--quiet"]) == 0
    first = ladder.warm_start

    def rebuilt(cfg, progress, threads):                # the same config, another model
        d = first(cfg, progress, threads)
        rec = json.loads((d / "sft.json").read_text())
        (d / "sft.json").write_text(json.dumps({**rec, "accuracy": 0.38, "weights": "b" * 16}))
        return d

    monkeypatch.setattr(ladder, "warm_start", rebuilt)
    monkeypatch.setattr(ladder, "cpu_model", lambda: "another CPU")
    capsys.readouterr()
    assert main(["ladder", "build", "--rung", "base", "--quiet"]) == 0
    assert "rung base was built as another model" in capsys.readouterr().err
    row = ladder.stored()["base"]
    assert row["warm_accuracy"] == 0.38 and row["warm_weights"] == "b" * 16
    assert [(p["warm_accuracy"], p["warm_weights"]) for p in row["previous_builds"]] == [
        (0.4, "0a" * 8)]
    assert main(["ladder", "build", "--rung", "base", "--quiet"]) == 0      # the same model
    assert "another model" not in capsys.readouterr().err
    assert len(ladder.stored()["base"]["previous_builds"]) == 1


def test_status_reads_the_builds_and_their_checkpoints(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))
    base, top = RUNGS[0], RUNGS[-1]
    done = tmp_path / "cache" / "sft" / config_hash(RUNGS[1].warm())
    done.mkdir(parents=True)
    (done / "sft.json").write_text("{}")
    part = partial_folder(tmp_path / "cache" / "corpus_lm" / corpus_key(top.corpus()))
    atomic_write_json(part / PROGRESS, {"step": 250, "seconds": 9.0, "saved": "then"})
    old = partial_folder(tmp_path / "cache" / "corpus_lm" / corpus_key(base.corpus()))
    old.mkdir(parents=True)
    (old / STATE).write_bytes(b"a checkpoint without its progress file")
    rows = {r["rung"]: r for r in ladder.status()}
    assert rows[base.name]["corpus"] == "checkpointed" and not rows[base.name]["built"]
    assert rows["w192"]["warm"] == "done"
    assert rows[top.name]["corpus"] == f"step 250 of {top.corpus().steps} (checkpoint then)"
    assert rows[top.name]["warm"].startswith("not started (at most")
    # a committed warm start (weights/base/) not in this cache: nothing to train
    assert rows[base.name]["warm"] == "committed (weights/base/, adopted on first use)"
    assert main(["ladder", "status"]) == 0
    out = capsys.readouterr().out
    assert f"{top.name:5s} not built; corpus LM step 250" in out
    assert "L1 Spearman PENDING" in out


def test_builds_of_a_rung_are_models_named_by_their_weights(monkeypatch, tmp_path, capsys):
    """Build ``b`` is corpus-LM seed ``b`` and warm-start seed ``b``; each built model is a row of
    ``results/ladder_models.json`` under ``{rung}.b{build}-{fingerprint}``; only build 0 enters
    the rung record ``results/ladder.json``; ``ladder status`` names each model's state."""
    from tailtheory.ladder import models

    _fake_builds(monkeypatch, tmp_path)
    assert main(["ladder", "build", "--rung", "base", "--build", "0", "--build", "1",
                 "--quiet"]) == 0
    rows = models.read()
    assert list(rows) == ["base.b0-0a0a0a0a", "base.b1-1a1a1a1a"]
    one = rows["base.b1-1a1a1a1a"]
    assert (one["build"], one["warm"]["weights"], one["corpus"]["weights"]) == (
        1, "1a" * 8, "c1" * 8)
    assert one["warm"]["key"] == tmp_path.joinpath("warm_128_1").name
    assert list(ladder.stored()) == ["base"]                      # build 0 only
    assert ladder.stored()["base"]["label"] == "base.b0-0a0a0a0a"
    assert {models.state(r) for r in rows.values()} == {"recorded"}
    capsys.readouterr()
    monkeypatch.setattr(ladder, "status", lambda: [])     # the rungs' cache (tested above)
    assert main(["ladder", "status"]) == 0
    out = capsys.readouterr().out
    assert "base.b1-1a1a1a1a" in out and "recorded" in out
    with pytest.raises(ValueError, match="not kept here"):
        models.load("base.b1-1a1a1a1a")


def test_a_build_not_committed_needs_its_corpus_lm(monkeypatch, tmp_path):
    _fake_builds(monkeypatch, tmp_path)
    monkeypatch.setattr(ladder, "committed", lambda cfg: None)
    with pytest.raises(ValueError, match="not committed in weights/"):
        ladder.build(["w256"], builds=(1,), corpus_lms=False)


@pytest.mark.parametrize("bad", ["base", "base.b0", "w999.b0-0910fc60", "base.bx-0910fc60",
                                 "base.b-1-0910fc60"])
def test_a_label_that_names_no_model_is_refused(bad):
    from tailtheory.ladder import models

    with pytest.raises(ValueError):
        models.parse_label(bad)


@pytest.mark.parametrize("build", [-1, 1.0, True, "1", 100])
def test_a_build_is_a_small_integer(build):
    with pytest.raises(ValueError, match="a build is an integer"):
        RUNGS[0].warm(build=build)


def test_builds_share_nothing_trained_and_build_zero_keeps_its_keys():
    base = RUNGS[0]
    assert config_hash(base.warm(build=0)) == config_hash(base.warm())
    assert corpus_key(base.corpus(0)) == corpus_key(base.corpus())
    one = base.warm(build=1)
    assert (one.seed, one.pretrained.seed) == (1, 1)
    assert config_hash(one) != config_hash(base.warm())
    with pytest.raises(ValueError, match="kk_prose"):
        base.warm("kk_knights", build=1)


def test_a_built_rung_names_its_two_models_and_machines(monkeypatch, tmp_path):
    """A rung's row of ``results/ladder.json`` names its warm start and its corpus LM
    (``warm_weights``, ``corpus_weights``) and the CPU that recorded it; its model's row of
    ``results/ladder_models.json`` names both with the machine each was built on."""
    from tailtheory.ladder import models

    _fake_builds(monkeypatch, tmp_path)
    ladder.build(["base"], progress=False)
    check_named(ladder.stored()["base"], ["0a" * 8, "c0" * 8], cpu_model())
    check_named(models.read()["base.b0-0a0a0a0a"], ["0a" * 8, "c0" * 8], "a CPU")
