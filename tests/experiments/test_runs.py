"""The run cache, multi-seed plots, presets and devices (``tailtheory/experiments/runs.py``,
``plot.py``, ``presets.py``, ``devices.py``, ``evaluate.py``).

Runs use a random tiny LM on ``kk`` (1-2 steps): what is tested is which runs are trained,
reused, continued or recomputed, not what they learn.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tailtheory.cli import main
from tailtheory.engine import config as config_mod
from tailtheory.experiments import runs
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.checkpoint import read_metrics
from tailtheory.engine.rundir import RunDirError, RunInUse

SMALL = dict(model="tiny", n_people=2, prompts_per_step=2, group_size=2, lr=3e-3, eval_every=1,
             eval_n=4, device="cpu")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _lines(path):
    return [{k: v for k, v in m.items() if not k.startswith("time/")} for m in read_metrics(path)]


def test_finished_run_is_reused_not_retrained(cache):
    cfg = TrainConfig(**SMALL, steps=1)
    path = runs.cached_run(cfg, progress=False)
    assert path.parent == cache / "runs" and len(read_metrics(path)) == 1
    stamp = (path / "metrics.jsonl").stat().st_mtime_ns
    assert runs.cached_run(cfg, progress=False) == path
    assert (path / "metrics.jsonl").stat().st_mtime_ns == stamp
    # a shorter request is served by the longer run; the key ignores length, out and threads
    assert runs.run_key(replace(cfg, steps=5, out="elsewhere", threads=2)) == path.name


def test_longer_request_continues_and_equals_a_straight_run(cache, tmp_path, monkeypatch):
    cfg = TrainConfig(**SMALL, steps=1)
    path = runs.cached_run(cfg, progress=False)
    runs.cached_run(replace(cfg, steps=2), progress=False)
    continued = _lines(path)
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "other"))
    straight = _lines(runs.cached_run(replace(cfg, steps=2), progress=False))
    assert len(continued) == 2 and continued == straight


def test_a_run_another_process_begins_first_is_waited_for_not_an_error(cache, monkeypatch):
    """Two processes ask for one run at once: the one that loses the lock waits for the other
    and then reads the finished run (the other process is played by a real run trained while
    the first waits)."""
    cfg = TrainConfig(**SMALL, steps=1)
    real_train, calls = runs.train, []

    def busy(c, **kw):
        calls.append(c.out)
        if len(calls) == 1:
            raise RunInUse(f"{c.out} is in use by another tailtheory process (pid 1)")
        return real_train(c, **kw)

    def other_process_finishes(out):
        if not runs.finished_steps(out):
            real_train(replace(cfg, out=str(out)), progress=False)

    monkeypatch.setattr(runs, "train", busy)
    monkeypatch.setattr(runs, "wait_for_writer", other_process_finishes)
    path = runs.cached_run(cfg, progress=False)
    assert len(read_metrics(path)) == 1 and len(calls) == 1   # found finished, not retrained


def test_a_run_folder_another_process_made_meanwhile_is_waited_for(cache, monkeypatch):
    """The other process made the folder (its config written, no line yet) after this one
    looked and before it started: the start is refused as 'already holds a run', and the run is
    looked at again instead of failing; a genuine refusal still raises after the retries."""
    cfg = TrainConfig(**SMALL, steps=1)
    real_train, calls = runs.train, []

    def made_meanwhile(c, **kw):
        calls.append(kw.get("resume"))
        if len(calls) == 1:
            Path(c.out).mkdir(parents=True)
            (Path(c.out) / "config.json").write_text("{}")
            raise RunDirError(f"{c.out} already holds a run (config.json)")
        return real_train(c, **kw)

    monkeypatch.setattr(runs, "train", made_meanwhile)
    path = runs.cached_run(cfg, progress=False)   # the other process died: started afresh
    assert len(read_metrics(path)) == 1 and calls == [False, False]

    def always(c, **kw):
        raise RunDirError("cannot create --out")
    monkeypatch.setattr(runs, "train", always)
    with pytest.raises(RunDirError, match="cannot create"):
        runs.cached_run(replace(cfg, seed=cfg.seed + 1), progress=False)


def test_cached_run_of_another_config_is_recomputed(capsys):
    cfg = TrainConfig(**SMALL, steps=1)
    path = runs.cached_run(cfg, progress=False)
    stored = json.loads((path / "config.json").read_text())
    stored["lr"] = 0.5  # as if the directory had been produced by another config
    (path / "config.json").write_text(json.dumps(stored))
    assert runs.cached_run(cfg, progress=False) == path
    assert "recomputing" in capsys.readouterr().err
    assert json.loads((path / "config.json").read_text())["lr"] == cfg.lr


def test_key_separates_configs_and_devices():
    cfg = TrainConfig(**SMALL, steps=1)
    assert runs.run_key(cfg) != runs.run_key(replace(cfg, seed=1))
    assert runs.run_key(cfg) != runs.run_key(replace(cfg, method="ar"))
    assert runs.run_key(cfg) == runs.run_key(replace(cfg, device="auto")) or \
        torch.cuda.is_available()   # auto resolves to cpu here


def test_fields_added_at_their_default_keep_old_keys(monkeypatch):
    cfg = TrainConfig(**SMALL, steps=1)
    before = runs.run_key(cfg)
    added = config_mod.ADDED_DEFAULTS
    monkeypatch.setattr(config_mod, "ADDED_DEFAULTS", {**added, "eta": cfg.eta})
    assert runs.run_key(cfg) != before   # the field left the key ...
    monkeypatch.setattr(config_mod, "ADDED_DEFAULTS", {**added, "eta": 0.123})
    assert runs.run_key(cfg) == before   # ... only while it holds the recorded default
    assert config_mod.without_added_defaults({"eta": 0.123, "lr": 1}) == {"lr": 1}
    assert config_mod.without_added_defaults({"eta": 0.5, "lr": 1}) == {"eta": 0.5, "lr": 1}


def test_run_seeds_order_and_bad_workers():
    paths = runs.run_seeds(TrainConfig(**SMALL, steps=1), seeds=(1, 0), progress=False)
    assert [json.loads((p / "config.json").read_text())["seed"] for p in paths] == [1, 0]
    cfgs, done = [TrainConfig(**SMALL, steps=1, seed=s) for s in (0, 2)], []
    runs.run_many(cfgs, progress=False, on_done=done.append)
    assert done == cfgs[1:]                     # the run this call trained; seed 0 was cached
    with pytest.raises(ValueError, match="workers"):
        runs.run_many([TrainConfig(**SMALL, steps=1)], workers=0)


@pytest.mark.slow
def test_workers_give_the_same_runs_as_one_process(tmp_path, monkeypatch):
    cfgs = [TrainConfig(**SMALL, steps=1, seed=s) for s in (0, 1)]
    two = [_lines(p) for p in runs.run_many(cfgs, workers=2, progress=False)]
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "one"))
    one = [_lines(p) for p in runs.run_many(cfgs, workers=1, progress=False)]
    assert two == one


def test_workers_on_gpus_each_see_the_least_shared_one(monkeypatch):
    """``gpus=2``, 3 workers, 5 runs: each child sees one GPU (``CUDA_VISIBLE_DEVICES``), the one
    the fewest running children share: when the first child (on GPU 0) ends, GPU 0 and GPU 1
    hold one child each, and the next child goes to GPU 0 (not round-robin's GPU 1)."""
    import subprocess

    seen = []

    class Child:  # the first child ends at its first poll, every other at its third
        def __init__(self, argv, env, **kw):
            seen.append(env["CUDA_VISIBLE_DEVICES"])
            self.index, self.polls, self.returncode = len(seen) - 1, 0, 0

        def poll(self):
            self.polls += 1
            return 0 if self.polls >= (1 if self.index == 0 else 3) else None

    monkeypatch.setattr(subprocess, "Popen", Child)
    cfgs = [TrainConfig(**SMALL, steps=1, seed=s) for s in range(5)]
    done = []
    runs._run_workers(cfgs, 3, done.append, gpus=2)
    assert seen == ["0", "1", "0", "0", "1"] and sorted(done, key=lambda c: c.seed) == cfgs


def test_plot_runs_bands_over_seeds_and_labels_by_difference():
    from tailtheory.experiments.plot import group_labels, plot_runs

    base = TrainConfig(**SMALL, steps=2)
    paths = runs.run_many([replace(base, seed=s, method=m) for m in ("grpo", "ar")
                           for s in (0, 1)], progress=False)
    assert group_labels(paths) == ["method=grpo"] * 2 + ["method=ar"] * 2
    fig, table = plot_runs(paths)
    reward = table[(table.metric == "reward/mean") & (table.label == "method=ar")]
    assert list(reward.step) == [0, 1] and (reward.seeds == 2).all()
    assert (reward.lo <= reward["mean"]).all() and (reward["mean"] <= reward.hi).all()
    df = runs.load_runs(paths[:2])
    for step in (0, 1):
        vals = df[df.step == step]["reward/mean"]
        row = table[(table.metric == "reward/mean") & (table.label == "method=grpo")
                    & (table.step == step)].iloc[0]
        assert row["mean"] == pytest.approx(vals.mean()) and row.hi == vals.max()
    evals = table[table.metric == "eval/accuracy"]
    assert set(evals.step) == {0, 1}   # eval_every=1: an evaluation at each step
    with pytest.raises(ValueError, match="labels"):
        runs.load_runs(paths, labels=["a"])


def test_plot_cli_writes_png_and_csv_and_rejects_bad_input(tmp_path, capsys):
    path = runs.cached_run(TrainConfig(**SMALL, steps=1), progress=False)
    out = tmp_path / "fig.png"
    assert main(["plot", str(path), "--out", str(out)]) == 0
    assert out.exists() and out.with_suffix(".csv").exists()
    assert main(["plot", str(path), "--out", str(tmp_path / "fig.txt")]) == 2
    assert main(["plot", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert main(["plot", str(path), "--steps", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert ".png" in err and "no config.json" in err


def test_cuda_without_gpu_is_an_error_before_any_run_dir(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "run"
    assert main(["train", "--model", "tiny", "--steps", "1", "--device", "cuda",
                 "--out", str(out)]) == 2
    assert not out.exists() and "CUDA" in capsys.readouterr().err


@pytest.mark.slow  # make test-thorough: a long check (make test stays under 15 minutes)
def test_a_failing_worker_is_reported_and_the_others_finish(tmp_path):
    empty = tmp_path / "no_model"
    empty.mkdir()
    good = TrainConfig(**SMALL, steps=1)
    bad = replace(good, model=str(empty), seed=1)
    with pytest.raises(RuntimeError, match=r"1 of 2 runs failed"):
        runs.run_many([bad, good], workers=2, progress=False)
    assert len(read_metrics(runs.runs_root() / runs.run_key(good))) == 1


# ---- every stored study's run identities, pinned -----------------------------------------------

PINNED = Path(__file__).parent / "data" / "run_identities.json"
"""Per stored study and its preset: each arm's run keys, start keys, warm-start hashes and store
identities, and the study's fingerprint, as the code computed them before the run identity became
one function (``run_identity`` and its views). Machine-free: the stored presets start from warm
starts named by their config hash, not from a folder of trained weights."""


def _identities_now(study, preset: str) -> dict:
    from tailtheory.core.measurements import fingerprint
    from tailtheory.engine.load import start_key, warm_config
    from tailtheory.engine.start.sft import config_hash

    ident = study.identity(preset)
    return {"fingerprint": fingerprint(ident), "arms": {
        a.label: [{"seed": c.seed, "run_key": runs.run_key(c), "start_key": start_key(c),
                   "warm_start": config_hash(warm_config(c)) if c.model == "warm" else None,
                   "store_identity": fingerprint(i)}
                  for c, i in zip(a.configs, ident[a.label])]
        for a in study.plan(preset)}}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a run key names the device: pinned on a CPU")
def test_every_stored_studys_run_identities_are_pinned():
    """Run keys, warm-start hashes and fingerprints of every stored study's arms are what they
    were: no stored row or cached run is orphaned by a change to how identities are computed."""
    from tailtheory.experiments.study import studies

    pinned = json.loads(PINNED.read_text())
    found = studies()
    assert {k.split("/")[0] for k in pinned} == set(found)
    for key, want in sorted(pinned.items()):
        name, preset = key.split("/")
        assert found[name].measure_preset == preset, key
        assert _identities_now(found[name], preset) == want, key


def test_stored_measurements_carry_the_pinned_fingerprints():
    """Each study's ``results/<name>.json`` is keyed by the pinned identities (a stored row of
    another config would be refused at read time)."""
    from tailtheory.core.measurements import fingerprint, measurement_path

    for key, want in json.loads(PINNED.read_text()).items():
        path = measurement_path(key.split("/")[0])
        if path.exists():
            record = json.loads(path.read_text())
            assert record["fingerprint"] == fingerprint(record["config"]), key
            for label, rows in record["config"].items():
                pinned = {r["seed"]: r["store_identity"] for r in want["arms"][label]}
                for row in rows:
                    assert fingerprint(row) == pinned[row["seed"]], (key, label, row["seed"])


def test_run_identity_views():
    """The store view is the cache view less the device, plus the run's length; an unknown view
    is one clear error."""
    cfg = replace(TrainConfig(task="kk", method="grpo", model="tiny", steps=3), seed=0)
    cache, store = runs.run_identity(cfg), runs.run_identity(cfg, "store")
    assert "device" in cache and "device" not in store and store["steps"] == 3
    assert {k: v for k, v in cache.items() if k != "device"} == {
        k: v for k, v in store.items() if k != "steps"}
    with pytest.raises(ValueError, match="unknown identity view 'disk'; views: cache, store"):
        runs.run_identity(cfg, "disk")
