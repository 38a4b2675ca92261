"""The executors' names, options and flags (``tailtheory/experiments/cluster.py``)."""

from __future__ import annotations

import argparse

import pytest

from tailtheory.experiments import cluster


def test_bad_options_are_one_line():
    with pytest.raises(ValueError, match="unknown executor 'k8s'; executors: local, ray, slurm"):
        cluster.check_executor("k8s")
    with pytest.raises(ValueError, match="runs_per_job must be an int >= 1"):
        cluster.ClusterOptions(runs_per_job=0)
    with pytest.raises(ValueError, match="max_retries must be an int >= 0"):
        cluster.ClusterOptions(max_retries=-1)


def test_flags_become_options_and_a_bare_namespace_takes_the_defaults():
    p = argparse.ArgumentParser()
    cluster.add_cluster_arguments(p)
    args = p.parse_args(["--executor", "slurm", "--runs-per-job", "4", "--time", "90",
                         "--partition", "cpu", "--device", "cuda", "--per-gpu", "8",
                         "--shared-cache", "/x"])
    opts = cluster.cluster_options(args)
    assert (opts.runs_per_job, opts.time_min, opts.partition, opts.device, opts.per_gpu,
            opts.cache) == (4, 90, "cpu", "cuda", 8, "/x")
    assert cluster.cluster_options(argparse.Namespace()) == cluster.ClusterOptions()


def test_under_ci_a_skipped_cluster_test_is_a_failure(monkeypatch):
    """``tests/conftest.py``'s report hook: with ``CI`` set, a skip of a test marked ``cluster``
    (Ray or submitit missing) becomes a failure; without ``CI``, or unmarked, it stays a skip."""
    from types import SimpleNamespace

    from tests import conftest

    def outcome_of(ci: str | None, marked: bool) -> str:
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        report = SimpleNamespace(skipped=True, outcome="skipped", longrepr="no module ray")
        item = SimpleNamespace(get_closest_marker=lambda name: marked and name == "cluster")
        hook = conftest.pytest_runtest_makereport(item, None)
        next(hook)
        with pytest.raises(StopIteration):
            hook.send(SimpleNamespace(get_result=lambda: report))
        return report.outcome

    assert outcome_of("true", True) == "failed"
    assert outcome_of(None, True) == "skipped" and outcome_of("true", False) == "skipped"
