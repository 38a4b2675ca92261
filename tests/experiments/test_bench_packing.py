"""The packing benchmark's pure parts (``benchmarks/bench_packing.py``): its command line, the
runs of a point, what it reads of ``/proc`` and ``nvidia-smi``, and the rows and table it writes.
Nothing is trained here (``--smoke`` checks the whole script by hand)."""

from __future__ import annotations

import runpy

import pytest

from tailtheory.core.io import REPO_ROOT


@pytest.fixture(scope="module")
def bench():
    return runpy.run_path(str(REPO_ROOT / "benchmarks" / "bench_packing.py"))


def test_the_command_line_takes_each_devices_curve_and_smoke_the_smallest(bench):
    cpu, cuda, smoke = (bench["parse"](a) for a in ([], ["--device", "cuda"], ["--smoke"]))
    assert (cpu.ks, cpu.steps, cpu.rounds, cpu.mps) == ((1, 2), 20, 1, True)
    assert cpu.out == str(REPO_ROOT / "benchmarks" / "results" / "packing-cpu.json")
    assert cuda.ks == (1, 2, 4, 8, 16) and cuda.out.endswith("packing-cuda.json")
    assert (smoke.ks, smoke.steps) == ((1, 2), 2)
    assert smoke.out is None                # a temporary folder: a smoke run never writes results
    assert bench["parse"](["--ks", "3", "5", "--steps", "7", "--out", "x.json"]).ks == (3, 5)
    with pytest.raises(SystemExit):
        bench["parse"](["--ks", "0"])


def test_a_points_runs_are_the_base_rungs_recipe_at_new_seeds(bench):
    runs = bench["run_configs"](range(4, 6), 20, "cpu", False)
    assert [c.seed for c in runs] == [4, 5] and {c.model for c in runs} == {"warm"}
    assert {(c.task, c.method, c.rung, c.steps, c.prompts_per_step) for c in runs} == {
        ("kk_prose", "grpo", "base", 20, 32)}
    (tiny,) = bench["run_configs"]([0], 2, "cuda", True)
    assert (tiny.model, tiny.task, tiny.steps, tiny.device) == ("tiny", "kk_prose", 2, "cuda")


def test_proc_and_nvidia_smi_are_read_as_written(bench):
    assert bench["vm_hwm_mib"]("VmPeak:\t 9000 kB\nVmHWM:\t    2048 kB\nVmRSS: 1 kB\n") == 2.0
    assert bench["vm_hwm_mib"]("Name: kthreadd\n") is None
    worker = b'/venv/bin/python\0-m\0tailtheory.experiments.runs\0{"seed": 3, "steps": 2}\0'
    assert bench["seed_of"](worker) == 3
    assert bench["seed_of"](b"python\0-c\0import tailtheory.experiments.runs\0") is None
    assert bench["parse_smi"]("123, 500\n456, [N/A]\n\n") == {123: 500.0}


def test_rows_count_runs_per_hour_and_the_table_reads_the_speed_up(bench):
    one = bench["row"]("plain", 1, 1, 1, 100.0, {0: 300.0}, {}, None, [90.0])
    two = bench["row"]("plain", 2, 2, 2, 100.0, {1: 310.0, 2: 330.0}, {}, None, [95.0, 97.0])
    assert (one["runs_per_hour"], two["runs_per_hour"]) == (36.0, 72.0)
    assert two["peak_rss_mib"] == {"max": 330.0, "mean": 320.0, "per_run": [310.0, 330.0]}
    assert two["peak_gpu_mib"] is None and two["cpu_s_per_run"] == 96.0
    gpu = bench["row"]("mps", 4, 4, 8, 50.0, {}, {}, 2000.0)
    assert gpu["peak_gpu_mib"] == {"max": 500.0} and gpu["gpu_mib_source"] == "GPUs' rise / runs"
    own = bench["row"]("mps", 2, 2, 2, 50.0, {}, {5: 700.0, 6: 650.0}, 9999.0)
    assert own["peak_gpu_mib"]["max"] == 700.0 and own["gpu_mib_source"] == "per process"
    table = bench["markdown"]({"device": "AMD EPYC (AVX512)", "cores": 2, "recipe": "matched",
                               "steps": 20, "rows": [one, two]})
    assert "AMD EPYC (AVX512), 2 cores" in table
    assert "| plain | 2 | 2 | 100.0 | 72.0 | 2.00x | 330 | - |" in table
