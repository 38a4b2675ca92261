"""Test configuration: offline hub, Hypothesis profiles, figures to a temporary folder.

Hypothesis profile by ``HYPOTHESIS_PROFILE`` (``dev``, ``ci``, ``thorough``); ``ci`` is the default
when ``CI`` is set and is derandomised so a CI run is reproducible.

Notebooks executed in a Jupyter kernel (``test_notebook_outputs.py``, nbmake's ``--nbmake`` runs)
run under nbclient as it is installed: nothing is patched (``notebook_kernel.py``).

``make test`` runs on two pytest workers (pytest-xdist, ``--dist loadgroup``). Each worker and
every process it starts (a notebook's kernel, a study's workers) uses one torch thread, so two
workers fill two cores without oversubscribing them; the training notebooks train in their own
kernel (``TAILTHEORY_WORKERS=1``). Tests that start worker processes of their own are grouped
(:data:`GROUPS`): the group runs on one worker, in order.
"""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Figures and claims.json written during tests go to a scratch folder, not the committed ones.
os.environ.setdefault("TAILTHEORY_FIGURES", tempfile.mkdtemp(prefix="tailtheory-figures-"))
# On a pytest-xdist worker: one torch thread here and in every process started from here.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    # the training notebooks train their runs in their own kernel, one after another, instead of
    # starting processes of their own (WORKERS, tailtheory.core.io.workers): the two pytest
    # workers already fill the cores, and each run process would import torch again
    os.environ.setdefault("TAILTHEORY_WORKERS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=60, **_COMMON)
settings.register_profile("ci", max_examples=60, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

if XDIST_WORKER:
    torch.set_num_threads(1)

GROUPS = {
    "workers": ("tests/experiments/test_runs.py", "tests/experiments/test_study.py",
                "tests/experiments/test_store_chaos.py"),
    "notebook_outputs": ("tests/test_notebook_outputs.py",),
}
"""pytest-xdist groups (``--dist loadgroup``), by path prefix. ``workers``: the tests that start
worker processes of their own (the run cache's and the studies' workers) run on one pytest
worker, one after another, so that at most one of them at a time adds its processes to the two
cores (the training notebooks train in their own kernel here: ``TAILTHEORY_WORKERS`` above).
``notebook_outputs``: its tests share one module-scoped execution of notebook 01 in a kernel,
which a split across two workers would run twice."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark each test of a :data:`GROUPS` path with its ``xdist_group`` (a no-op without xdist)."""
    root = config.rootpath
    for item in items:
        try:
            rel = item.path.relative_to(root).as_posix()
        except ValueError:
            continue
        for group, prefixes in GROUPS.items():
            if rel.startswith(prefixes):
                item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI``, a skipped test marked ``cluster`` (Ray, submitit) fails: CI installs the
    extras they need, so a skip there means the set-up lost them."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and item.get_closest_marker("cluster"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI (install tailtheory[ray,slurm]): {report.longrepr}"


@pytest.fixture
def one_thread():
    """One intra-op torch thread for the test (restored after): tiny tensors run faster without
    thread hand-offs, above all on a busy machine. Use with ``pytest.mark.usefixtures``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
