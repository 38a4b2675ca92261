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
