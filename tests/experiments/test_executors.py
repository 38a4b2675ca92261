"""Studies that leave one machine (``tailtheory/experiments/executors.py``): submitit's array (in
this process, and its local executor), Ray tasks on one shared local instance (retries of a
killed worker, a failing run not retried), the same study giving the same rows under every
executor, a restarted driver re-attaching to its array. The tests that start processes (marked ``cluster_run``: a Ray instance, whose start alone
takes about 10 s here, or submitit's local executor) run in ``make test-cluster``, not ``make
test``.

The study is two arms x two seeds of a random tiny LM on ``kk`` (2 steps), or of the same
from a model saved in a folder (a user's checkpoint, ``--model PATH``): what is tested is where
runs train and what is stored, not what they learn. With ``CI`` set, a skipped test of this
file is a failure (``tests/conftest.py``): CI installs ``tailtheory[ray,slurm]``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tailtheory.engine.config import TrainConfig
from tailtheory.experiments import executors as ex
from tailtheory.experiments import remote
from tailtheory.experiments.cluster import ClusterOptions
from tailtheory.experiments.incremental import load_done, stored_record
from tailtheory.experiments.study import Arm, Study
from tests.experiments.test_remote import SMALL, saved_model, unwritable

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.cluster]


def study_of(model: str = "tiny", name: str = "demo_cluster") -> Study:
    """Two arms (GRPO, AR) x seeds 0 and 1 of :data:`SMALL` from ``model``."""

    def arms(preset):
        base = TrainConfig(**{**SMALL, "model": model})
        return [Arm(label, tuple(replace(base, method=m, seed=s) for s in (0, 1)), {"method": m})
                for label, m in (("GRPO", "grpo"), ("AR", "ar"))]

    return Study(name, arms, series={"k3": "mismatch/k3"}, measure_preset="quick")


STUDY = study_of()


@pytest.fixture
def places(monkeypatch, tmp_path):
    """The driver's run cache and results in ``tmp_path``; test modules importable by the
    processes a backend starts (submitit's local executor, Ray's workers)."""
    monkeypatch.setenv("TAILTHEORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path / "results"))
    (tmp_path / "results").mkdir()
    return tmp_path


def _stored_without_timings(name: str) -> dict:
    record = stored_record(name)
    rows = {lb: [ex.without_timings({"row": r})["row"] for r in rs]
            for lb, rs in record["data"].items()}
    return {"config": record["config"], "data": rows}


# ---- submitit's array, in this process -----------------------------------------------------------

def test_submitit_array_in_this_process_stores_every_run_and_a_restart_skips_them(places):
    """submitit's debug executor (in this process): 4 runs in 2 array elements; the rows are
    the study's, stored by the driver; a second call finds nothing to train."""
    submitit = pytest.importorskip("submitit")
    del submitit
    opts = ClusterOptions(cluster="debug", folder=str(places / "submitit"), runs_per_job=2,
                             cache=str(places / "worker"))
    assert "2 elements (2 runs each" in ex.plan_text(STUDY, "quick", "slurm", 2, opts)
    assert ex.chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    records = ex.run_study(STUDY, "quick", "slurm", options=opts, progress=False)
    assert sorted((r["label"], r["row"]["seed"]) for r in records) == [
        ("AR", 0), ("AR", 1), ("GRPO", 0), ("GRPO", 1)]
    m = load_done(STUDY)
    assert m.missing == {} and len(m["GRPO"][0]["k3"]) == 2
    assert not (places / "cache" / "runs").exists()            # the driver trained nothing
    assert ex.run_study(STUDY, "quick", "slurm", options=opts, progress=False) == []


def test_cli_refuses_an_unknown_executor_and_dry_runs_an_array(places, monkeypatch, capsys):
    from tailtheory.cli import main
    from tailtheory.experiments import study as study_mod

    monkeypatch.setitem(study_mod._STUDIES, STUDY.name, STUDY)
    assert main(["study", STUDY.name, "--executor", "k8s"]) == 2
    assert "unknown executor 'k8s'; executors: local, ray, slurm" in capsys.readouterr().err
    assert main(["study", STUDY.name, "--executor", "slurm", "--runs-per-job", "3",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "GRPO seed 1 on cpu" in out and "4 runs in one job array of 2 elements" in out
    with pytest.raises(ValueError, match="stores the runs it receives"):
        ex.run_study(STUDY, "learn", "ray")


def test_local_on_a_named_device_stores_the_studys_rows(places):
    """``--device`` on ``local``: the runs train there, and their rows carry the study's
    identity (the device is the machine, not the experiment)."""
    ex.run_study(STUDY, "quick", "local", workers=1, options=ClusterOptions(device="cpu"),
                 progress=False)
    m = load_done(STUDY)
    assert m.missing == {} and stored_record(STUDY.name)["config"] == STUDY.identity("quick")
    assert ex.todo(STUDY, "quick") == []


# ---- Ray: one local instance for the whole test run ---------------------------------------------

@pytest.fixture(scope="session")
def ray_instance(tmp_path_factory):
    """A local Ray instance of 2 CPUs whose workers see a results folder nobody can create and
    import this test package; shut down at the end of the session."""
    ray = pytest.importorskip("ray")
    tmp = tmp_path_factory.mktemp("ray")
    tests = Path(__file__).resolve().parents[1]
    path = os.pathsep.join([str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TAILTHEORY_RESULTS": unwritable(tmp),
                                       "TAILTHEORY_CACHE": str(tmp / "cache"),
                                       "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()


def test_ray_asks_a_fraction_of_a_gpu_per_packed_run():
    assert ex.ray_resources(ClusterOptions(per_gpu=4), "cuda") == {"num_cpus": 1,
                                                                     "num_gpus": 0.25}
    assert ex.ray_resources(ClusterOptions(per_gpu=4), "cpu")["num_gpus"] == 0


def test_a_folder_models_files_are_put_once_for_the_whole_study(places):
    """Ray: the files of the checkpoint every run starts from are read and put in the object
    store once; the jobs carry its path and fingerprints, not its bytes."""
    study = study_of(str(saved_model(places / "ckpt")), "demo_folder")
    jobs = ex.jobs(study, "quick", ex.todo(study, "quick"), ClusterOptions())
    put = []
    refs = ex.start_refs(jobs, lambda files: put.append(files) or len(put))
    assert refs == [1, 1, 1, 1] and len(put) == 1 and "model.safetensors" in put[0]
    assert {j.folder for j in jobs} == {str((places / "ckpt").resolve())}
    assert all(j.start is None for j in jobs)
    assert ex.start_refs(ex.jobs(STUDY, "quick", ex.todo(STUDY, "quick")[:1],
                                 ClusterOptions()), None) == [None]


@pytest.mark.cluster_run
@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("model", ["tiny", "folder"])
def test_local_ray_and_submitit_store_the_same_rows(places, ray_instance, monkeypatch, model):
    """The same study under ``local``, ``ray`` (whose workers cannot write results/) and
    submitit's local executor (a process per array element, with a time limit): the stored
    configs and rows are equal, timings aside; from a random tiny LM, and from a checkpoint
    saved in a folder (its files put once in Ray's object store; read at its path by each
    array element), whose rows name the folder and its fingerprints as the local runs do."""
    pytest.importorskip("submitit")
    tests = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests.parent), str(tests),
                                                      os.environ.get("PYTHONPATH", "")]))
    study = STUDY if model == "tiny" else study_of(str(saved_model(places / "ckpt")))
    stored = {}
    for name in ("local", "ray", "slurm"):
        monkeypatch.setenv("TAILTHEORY_CACHE", str(places / name / "cache"))
        monkeypatch.setenv("TAILTHEORY_RESULTS", str(places / name / "results"))
        (places / name / "results").mkdir(parents=True)
        opts = ClusterOptions(cluster="local", folder=str(places / name / "submitit"),
                                 time_min=5, runs_per_job=4, cache=str(places / name / "w"))
        ex.run_study(study, "quick", name, workers=1, options=opts, progress=False)
        stored[name] = _stored_without_timings(study.name)
    assert stored["local"]["config"] == study.identity("quick")
    assert stored["ray"] == stored["local"] and stored["slurm"] == stored["local"]
    starts = {r["provenance"]["start"] for rows in stored["ray"]["data"].values() for r in rows}
    assert starts == ({None} if model == "tiny" else {f"path:{(places / 'ckpt').resolve()}"})


@pytest.mark.cluster_run
@pytest.mark.xdist_group("ray")
def test_a_killed_ray_worker_is_retried_and_stored_once(places, ray_instance):
    """SIGKILL to the worker process mid-run: Ray starts the task again, the second attempt
    trains the run from its start (the killed attempt's folder is left aside), one row."""
    long = Study("demo_kill", lambda preset: [Arm("A", (TrainConfig(**{
        **SMALL, "steps": 400, "eval_every": 1000, "seed": 7}),), {})], measure_preset="quick")
    worker = places / "worker"
    opts = ClusterOptions(cache=str(worker))
    killed = []

    def kill_first_attempt():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for f in (worker / "runs" / remote.ATTEMPTS).glob("*/attempt.txt"):
                if (f.parent / "run" / "metrics.jsonl").exists():  # training has begun
                    pid = int(f.read_text().split()[1])
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_first_attempt)
    killer.start()
    records = ex.run_study(long, "quick", "ray", options=opts, progress=False)
    killer.join()
    assert killed and [r["attempt"] for r in records] == [2]
    assert [r["seed"] for r in stored_record("demo_kill")["data"]["A"]] == [7]
    assert len(remote.attempts(worker / "runs", records[0]["key"])) == 1


@pytest.mark.cluster_run
@pytest.mark.xdist_group("ray")
def test_a_run_that_raises_is_reported_with_its_log_and_not_retried(places, ray_instance):
    opts = ClusterOptions(cache=str(places / "worker"))
    jobs = ex.jobs(STUDY, "quick", ex.todo(STUDY, "quick")[:2], opts)
    jobs[0] = replace(jobs[0], weights="0" * 16)
    got = []
    failed = ex.run_ray(jobs, got.append, opts, progress=False)
    assert len(failed) == 1 and "starting weights here" in failed[0]
    assert [r["key"] for r in got] == [jobs[1].key]
    assert len(remote.attempts(places / "worker" / "runs", jobs[0].key)) == 1   # one attempt


@pytest.mark.cluster_run
def test_a_restarted_driver_reattaches_to_its_array_and_resubmits_what_vanished(places,
                                                                                monkeypatch):
    """submitit's local executor (a process per element, 5-minute limit): the array is recorded;
    a driver started again after losing its store takes the finished element's records from
    submitit's folder and submits again only the runs of the element whose result vanished."""
    pytest.importorskip("submitit")
    tests = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests.parent), str(tests),
                                                      os.environ.get("PYTHONPATH", "")]))
    opts = ClusterOptions(cluster="local", folder=str(places / "submitit"), time_min=5,
                             runs_per_job=2, cache=str(places / "worker"))
    ex.run_study(STUDY, "quick", "slurm", options=opts, progress=False)
    first = json.loads(ex.array_path(opts.folder, STUDY.name).read_text())["elements"]
    assert len(first) == 2
    import submitit

    submitit.LocalJob(opts.folder, first[1]["job_id"]).paths.result_pickle.unlink()
    (places / "results" / f"{STUDY.name}.json").unlink()       # the driver's store is lost
    records = ex.run_study(STUDY, "quick", "slurm", options=opts, progress=False)
    again = json.loads(ex.array_path(opts.folder, STUDY.name).read_text())["elements"]
    assert [e["keys"] for e in again] == [first[1]["keys"]]    # only the vanished element's runs
    assert again[0]["job_id"] != first[1]["job_id"] and len(records) == 4
    assert load_done(STUDY).missing == {}
