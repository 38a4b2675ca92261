"""Where the engine runs (``tailtheory.engine.devices``): ``auto``, ``cpu``, ``cuda``, and a
clear error for anything else or for ``cuda`` without a GPU."""

import pytest
import torch


def test_devices():
    from tailtheory.engine.devices import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="valid devices: auto, cpu, cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA"):
            resolve_device("cuda")
