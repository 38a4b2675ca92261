"""Test configuration: offline hub, Hypothesis profiles, figures to a temporary folder.

Hypothesis profile by ``HYPOTHESIS_PROFILE`` (``dev``, ``ci``, ``thorough``); ``ci`` is the default
when ``CI`` is set and is derandomised so a CI run is reproducible.

Notebooks executed in a Jupyter kernel (``test_notebook_outputs.py``, nbmake's ``--nbmake`` runs)
run under nbclient as it is installed: nothing is patched (``notebook_kernel.py``).
"""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Figures and claims.json written during tests go to a scratch folder, not the committed ones.
os.environ.setdefault("TAILTHEORY_FIGURES", tempfile.mkdtemp(prefix="tailtheory-figures-"))

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=60, **_COMMON)
settings.register_profile("ci", max_examples=60, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def one_thread():
    """One intra-op torch thread for the test (restored after): tiny tensors run faster without
    thread hand-offs, above all on a busy machine. Use with ``pytest.mark.usefixtures``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
